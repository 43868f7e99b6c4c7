"""What mfsdp says of a user's OMP_NUM_THREADS is what torch runs: torch's MKL builds run at
most one thread per physical core (OMP_NUM_THREADS=64 on 2 cores was said to be 64 threads
where torch ran 2), a value is left as the user wrote it, and a rank of the user's own
torchrun, which sets OMP_NUM_THREADS=1 itself, is not told to unset it."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.support.paths import REPO
from trainer import threads

CHOSEN_THEN_TORCH = """
import sys
from cli.verbosity import configure_logging
from trainer.threads import configure_threads
configure_logging()
configure_threads(int(sys.argv[1]))
import torch
print(torch.get_num_threads())
"""


@pytest.mark.parametrize("mkl_dynamic", [None, "FALSE"])
@pytest.mark.parametrize("local_ranks", [1, 2])
def test_the_count_said_is_the_count_torch_runs(local_ranks, mkl_dynamic):
    asked = 32 * (os.cpu_count() or 1)  # past any machine's cores
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MKL_DYNAMIC", "LOCAL_RANK", threads.CHOSEN_MARKER)
    }
    env.update(PYTHONPATH=str(REPO), MFSDP_LOG_LEVEL="INFO", OMP_NUM_THREADS=str(asked))
    if mkl_dynamic:
        env["MKL_DYNAMIC"] = mkl_dynamic
    done = subprocess.run(
        [sys.executable, "-c", CHOSEN_THEN_TORCH, str(local_ranks)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    ran = int(done.stdout)
    assert re.findall(r"(\d+) CPU thread\(s\) per process", done.stderr) == [str(ran)]
    total = ran * local_ranks
    noted = re.search(r"= (\d+) threads on", done.stderr)
    if total > len(threads.available_cores()):
        assert noted and int(noted.group(1)) == total, done.stderr
    else:
        assert noted is None, done.stderr


def test_a_users_list_stays_as_written(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "4,2")
    monkeypatch.delenv(threads.CHOSEN_MARKER, raising=False)
    threads.configure_threads(1)
    assert os.environ["OMP_NUM_THREADS"] == "4,2"


def test_a_rank_of_the_users_torchrun_is_not_told_to_unset_its_value(monkeypatch, caplog):
    for name, value in {
        "OMP_NUM_THREADS": "1",  # what torchrun sets where it is unset
        "TORCHELASTIC_RUN_ID": "none",
        "LOCAL_RANK": "0",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(threads.CHOSEN_MARKER, raising=False)
    with caplog.at_level("INFO", logger="mfsdp.threads"):
        threads.configure_threads(2)
    assert "by you or by torchrun" in caplog.text
    assert "unset OMP_NUM_THREADS" not in caplog.text
    assert "mfsdp train --nproc-per-node" in caplog.text
