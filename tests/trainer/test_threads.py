"""CPU threads per training process (trainer/threads.py): chosen before torch loads OpenMP,
from the cores, the local ranks and the load; a user's setting wins."""

import os
import subprocess
import sys

import pytest

from tests.support.paths import REPO
from trainer import threads
from trainer.threads import choose_threads


@pytest.fixture
def eight_cores(monkeypatch):
    monkeypatch.setattr(threads, "available_cores", lambda: list(range(8)))


def test_users_omp_num_threads_wins(eight_cores):
    choice = choose_threads(1, idle_cores=8.0, environ={"OMP_NUM_THREADS": "3"})
    assert (choice.threads, choice.wait_policy) == (3, None)


def test_a_malformed_user_value_is_replaced(eight_cores):
    assert choose_threads(1, idle_cores=8.0, environ={"OMP_NUM_THREADS": "many"}).threads == 8


def test_idle_machine_shares_its_cores_between_local_ranks(eight_cores):
    assert choose_threads(1, idle_cores=8.0, environ={}).threads == 8
    assert choose_threads(2, idle_cores=8.0, environ={}).threads == 4
    assert choose_threads(16, idle_cores=8.0, environ={}).threads == 1


def test_busy_cores_are_left_to_their_jobs(eight_cores):
    assert choose_threads(1, idle_cores=2.0, environ={}).threads == 2
    assert choose_threads(2, idle_cores=0.3, environ={}).threads == 1
    assert choose_threads(1, idle_cores=7.8, environ={}).threads == 8  # noise costs no thread


def test_waiters_sleep_only_on_a_busy_machine_unless_the_user_set_a_policy(eight_cores):
    assert choose_threads(1, idle_cores=8.0, environ={}).wait_policy is None
    assert choose_threads(1, idle_cores=2.0, environ={}).wait_policy == "PASSIVE"
    assert (
        choose_threads(1, idle_cores=2.0, environ={"OMP_WAIT_POLICY": "ACTIVE"}).wait_policy is None
    )


def test_idle_sample_counts_only_allowed_cores():
    cores = threads.available_cores()
    assert 0 <= threads.idle_cores_now(cores, seconds=0.05) <= len(cores) + 1e-6


CHOSEN_THEN_TORCH = """
import sys
from cli.verbosity import configure_logging
from trainer.threads import configure_threads
configure_logging()
choice = configure_threads(int(sys.argv[1]))
import torch
print(choice.threads, torch.get_num_threads())
"""


@pytest.mark.parametrize("local_ranks", [1, 64])
def test_the_choice_reaches_torch_and_is_logged_once(local_ranks):
    env = {
        k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", threads.CHOSEN_MARKER)
    }
    done = subprocess.run(
        [sys.executable, "-c", CHOSEN_THEN_TORCH, str(local_ranks)],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(REPO), "MFSDP_LOG_LEVEL": "INFO"},
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    chosen, in_torch = map(int, done.stdout.split())
    assert chosen == in_torch >= 1
    noted = "local ranks on" in done.stderr
    assert noted == (local_ranks > len(threads.available_cores())), done.stderr
    if local_ranks > len(threads.available_cores()):
        assert chosen == 1
    assert done.stderr.count("CPU thread(s) per process") == 1


def test_more_local_ranks_than_cores_is_noted(eight_cores):
    assert threads.oversubscribed(8) is None
    note = threads.oversubscribed(9)
    assert "9 local ranks on 8 CPU core(s)" in note and "--nproc-per-node 8" in note


def test_a_users_thread_count_above_the_cores_is_noted(eight_cores):
    """OMP_NUM_THREADS=8 on 2 cores was logged "as set; set OMP_NUM_THREADS to override"."""
    assert threads.threads_oversubscribed(4, 2) is None
    note = threads.threads_oversubscribed(8, 2)
    assert "OMP_NUM_THREADS=8 x 2 process(es) = 16 threads on 8 CPU core(s)" in note
    assert "unset OMP_NUM_THREADS" in note


def test_a_users_count_is_logged_with_how_to_let_mfsdp_choose(monkeypatch, caplog, eight_cores):
    monkeypatch.setenv("OMP_NUM_THREADS", "16")
    monkeypatch.setenv("MKL_DYNAMIC", "FALSE")  # torch then runs the 16 asked for
    monkeypatch.delenv(threads.CHOSEN_MARKER, raising=False)
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.delitem(sys.modules, "torch", raising=False)  # nothing to set in this process
    with caplog.at_level("INFO", logger="mfsdp.threads"):
        threads.configure_threads(1)
    assert "(OMP_NUM_THREADS as set); unset OMP_NUM_THREADS to let mfsdp choose" in caplog.text
    assert "16 threads on 8 CPU core(s)" in caplog.text


@pytest.mark.parametrize(
    ("environ", "said"),
    [({"LOCAL_RANK": "1"}, True), ({"LOCAL_RANK": "1", "RANK": "1"}, False)],
    ids=["left-in-the-shell", "a-rank"],
)
def test_the_choice_is_said_by_all_but_the_ranks_past_a_machines_first(
    monkeypatch, caplog, eight_cores, environ, said
):
    """A LOCAL_RANK left in the launching shell (no RANK beside it) hid the line; a rank of
    a user's own torchrun other than its machine's first stays quiet."""
    for name in ("LOCAL_RANK", "RANK", "OMP_NUM_THREADS", threads.CHOSEN_MARKER):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delitem(sys.modules, "torch", raising=False)  # nothing to set in this process
    with caplog.at_level("INFO", logger="mfsdp.threads"):
        threads.configure_threads(1)
    assert ("CPU thread(s) per process" in caplog.text) is said, caplog.text
