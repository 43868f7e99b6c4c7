"""A run interrupted after logging steps past its last checkpoint, then resumed, logs those
steps again: metrics.jsonl drops the earlier run's records of them, and TensorBoard must
show each step once too. Its event files kept the discarded steps' values beside the new
ones (steps 1..16, 17, 17, 18..30), so a curve after a resume with a changed setting
(`optim.lr`) mixed two runs' values."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from tests.support.launched_sft import launch_tiny_sft
from tests.support.metrics import read_metrics
from tests.support.sft import write_chat_jsonl


def _finish(process: subprocess.Popen) -> tuple[int, str]:
    try:
        _out, err = process.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise
    return process.returncode, err


@pytest.mark.parametrize(
    "save_every, interrupted_at",
    [(4, 2), (2, 3)],  # no step saved yet (the run starts over), or step 2 saved (resumed)
)
def test_tensorboard_shows_each_step_once_after_an_interrupted_run_resumed(
    tmp_path, save_every, interrupted_at
):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=48)
    overrides = (
        f"data.train_files={data}",
        "trainer.total_steps=8",
        f"checkpoint.save_every={save_every}",
        "trainer.log_every=1",
        "trainer.eval_every=0",
        "trainer.logger=[console,jsonl,tensorboard]",
    )
    first = launch_tiny_sft(tmp_path, *overrides, nproc=1)
    assert first.stderr is not None
    for line in first.stderr:  # a step is logged: the interrupt comes before or after a save
        if line.startswith(f"[sft] step {interrupted_at}/"):
            break
    os.killpg(first.pid, signal.SIGINT)
    code, err = _finish(first)
    assert code == 130, err
    run = tmp_path / "run"
    logged_before = [record["step"] for record in read_metrics(run)]
    assert logged_before and logged_before[-1] < 8, logged_before  # steps to log again

    code, err = _finish(launch_tiny_sft(tmp_path, *overrides, nproc=1))
    assert code == 0, err
    records = read_metrics(run)
    losses = {record["step"]: record["train/loss"] for record in records if "train/loss" in record}
    assert [record["step"] for record in records if "train/loss" in record] == list(range(1, 9))
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    scalars = events.Scalars("train/loss")
    assert [event.step for event in scalars] == list(range(1, 9))
    assert all(abs(event.value - losses[event.step]) < 1e-5 for event in scalars)
