"""A rank of `mfsdp train --nproc-per-node 2` stopped by a signal the run did not send ends
with the line a Ctrl-C ends with: the rank and the signal, the step reached, the newest
checkpoint and how to resume from it. A `kill -9` of one rank (the out-of-memory killer's
case) said only `rank 1: killed by SIGKILL`, and a `kill -INT` of rank 0 alone was said as
rank 1's "lost contact" with gloo's text, exit 1."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from mfsdp_ckpt.format import run_steps
from tests.support.cli_errors import lines_besides_starting
from tests.support.launched_sft import lines_until_step, step_reached, train_until_stopped
from tests.support.metrics import read_metrics


def _parents() -> dict[int, int]:
    """Every process's parent pid, by pid."""
    parents = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:  # gone meanwhile
            continue
        parents[int(entry)] = int(stat[stat.rindex(b")") + 2 :].split()[1])
    return parents


def _rank_pid(launcher: int, rank: int) -> int:
    """The pid of the process under `launcher` that torchrun started as rank `rank` (torch
    starts each rank in a session of its own)."""
    parents = _parents()
    under, found = {launcher}, True
    while found:
        found = False
        for pid, parent in parents.items():
            if parent in under and pid not in under:
                under.add(pid)
                found = True
    for pid in under - {launcher}:
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                environment = handle.read().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in environment and any(
            name.startswith(b"LOCAL_RANK=") for name in environment
        ):
            return pid
    raise AssertionError(f"no rank {rank} under pid {launcher}")


@pytest.mark.parametrize(
    "rank, sig, code, stopped",
    [
        (1, signal.SIGKILL, 1, "rank 1: killed by SIGKILL (out of memory? see dmesg)"),
        (0, signal.SIGINT, 130, "rank 0: interrupted"),
    ],
)
def test_a_rank_a_signal_stopped_is_said_with_the_newest_checkpoint(
    tmp_path, rank, sig, code, stopped
):
    process = train_until_stopped(
        tmp_path,
        "checkpoint.save_every=1",
        "trainer.log_every=1",
    )
    lines = lines_until_step(process, 3)  # the third step's log line: a step has been saved
    os.kill(_rank_pid(process.pid, rank), sig)
    try:
        _out, rest = process.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise
    assert process.returncode == code, "".join(lines) + rest
    run = tmp_path / "run"
    newest = run_steps.read_tracker(run)
    assert newest in run_steps.list_complete_steps(run)
    reached = max(record["step"] for record in read_metrics(run))
    said = [line for line in lines_besides_starting(rest) if not line.startswith("[sft] step ")]
    assert said == [
        f"error: {stopped}{step_reached(run, reached, newest, 1)}; the newest checkpoint is"
        f" {run}/global_step_{newest}: run the same command again to resume from it"
    ], rest


def test_a_rank_interrupted_alone_is_named_over_the_peers_that_lost_it(tmp_path):
    """Rank 0 interrupted alone stops slowly, after rank 1 lost contact with it and exited,
    and torchrun ends rank 0 with SIGTERM: the run is rank 0's interrupt (exit 130), not
    rank 1's "lost contact" with gloo's text (exit 1)."""
    from tests.support.launched_rank import two_ranks_env
    from tests.support.paths import REPO

    command = [sys.executable, "-m", "cli.torchrun", "--standalone", "--nproc-per-node=2"]
    command += ["-m", "tests.support.slow_to_stop_rank", "all-reduce", str(tmp_path)]
    launched = subprocess.Popen(
        command, cwd=REPO, env=two_ranks_env(), stderr=subprocess.PIPE, text=True
    )
    try:
        while not (tmp_path / "0").exists():
            assert launched.poll() is None, launched.communicate()
            time.sleep(0.05)
        os.kill(int((tmp_path / "0").read_text()), signal.SIGINT)
        _out, stderr = launched.communicate(timeout=120)
    finally:
        launched.kill()
    assert launched.returncode == 130, stderr
    assert lines_besides_starting(stderr) == ["error: rank 0: interrupted"], stderr
