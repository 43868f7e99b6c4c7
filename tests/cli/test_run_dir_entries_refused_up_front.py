"""What stands where a run writes in its run dir is checked before torch loads, whatever it
is: a directory or FIFO at metrics.jsonl passed `mfsdp config check`, and `mfsdp train`
loaded torch, rewrote config.yaml and trained a step before failing with exit 1 and "run
the same command again to resume", which failed the same way every time; a FIFO or
directory at config.yaml was exit 1 after torch loaded, where a symlink there is exit 2
before it. And a save cut short by a SIGKILL of the ranks' launcher was said to be
"removed" while its `global_step_N.tmp` stayed on disk."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
import torch

from cli.launch import load_checked_config
from cli.run_report import interrupted_run
from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from tests.support.paths import EXAMPLES
from trainer.config import SFTConfig, load_config
from trainer.metrics import METRICS_FILE, MetricsLogger, drop_steps_after
from trainer.run_ended import run_ended
from trainer.run_files import RunDirEntryError

# (name the run writes in its run dir, whether it is a directory there): one of each
# pattern of `trainer.run_dir_links.WRITTEN_NAMES`
FILES = (
    "config.yaml",
    "config.until_step_2.yaml",
    "metrics.jsonl",
    "latest_checkpointed_iteration.txt",
    ".latest_checkpointed_iteration.txt.4242.tmp",
)
DIRS = ("tensorboard", "wandb", "rollout_model", "global_step_3.tmp")


def _put(path: Path, what: str) -> None:
    """Make `path` the entry `what` names."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if what == "a directory":
        path.mkdir()
    elif what == "a FIFO":
        os.mkfifo(path)
    else:
        path.write_text("notes\n")


@pytest.mark.parametrize(
    ("name", "what", "wanted"),
    [(name, what, "a regular file") for name in FILES for what in ("a directory", "a FIFO")]
    + [(name, what, "a directory") for name in DIRS for what in ("a regular file", "a FIFO")],
)
def test_anything_but_what_the_run_writes_is_refused_before_it_starts(
    tmp_path, monkeypatch, name, what, wanted
):
    """`load_checked_config` is what `config check` and `train` both run before torch."""
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    _put(run / name, what)
    with pytest.raises(RunDirEntryError) as caught:
        load_checked_config(SFTConfig, None, [f"trainer.run_dir={run}"])
    assert str(caught.value) == (
        f"{run / name}: {what}, not {wanted}; the run writes this name itself: move it away,"
        " or choose another trainer.run_dir"
    )
    assert caught.value.exit_code == 2


def test_what_the_run_writes_itself_passes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    for name in FILES[:3]:
        _put(run / name, "a regular file")
    for name in DIRS[:2]:
        _put(run / name, "a directory")
    _put(run / "notes", "a FIFO")  # a name the run never writes is the user's
    load_checked_config(SFTConfig, None, [f"trainer.run_dir={run}"])


@pytest.mark.parametrize("what", ["a directory", "a FIFO"])
def test_the_metrics_writers_refuse_it_as_they_start(tmp_path, what):
    """Each rank-0 writer checks again as it starts, before any step trains: resuming,
    `drop_steps_after` took a directory there for "no records yet", and the logger found it
    only at the first step's record."""
    run = tmp_path / "run"
    _put(run / METRICS_FILE, what)
    for start in (
        lambda: drop_steps_after(run, 1),
        lambda: MetricsLogger(run, True, SFTConfig().trainer),
    ):
        with pytest.raises(RunDirEntryError, match=f"^{run / METRICS_FILE}: {what}, not a"):
            start()


def _cfg(run: Path, *overrides: str):
    return load_config(
        SFTConfig, str(EXAMPLES / "sft_tiny_cpu.yaml"), [f"trainer.run_dir={run}", *overrides]
    )


def _saved_run(run: Path, steps: int, saved: int) -> None:
    """`run` with its steps 1..`steps` logged and a checkpoint of step `saved`."""
    Checkpointer(run, strategy="none").save(
        saved, {"model": {"w": torch.ones(2)}}, contents=("model",)
    )
    lines = "".join(json.dumps({"step": s, "train/loss": 1.0}) + "\n" for s in range(1, steps + 1))
    (run / "metrics.jsonl").write_text(lines)


def test_a_run_ended_by_what_a_rerun_refuses_is_not_told_to_run_again(tmp_path):
    """A FIFO put at metrics.jsonl while the run trained: the next run is refused before
    it starts, so "run the same command again to resume" would only fail again."""
    run = tmp_path / "run"
    _saved_run(run, 2, 2)
    (run / "metrics.jsonl").unlink()
    os.mkfifo(run / "metrics.jsonl")
    failed = CheckpointFileError(f"{run / 'metrics.jsonl'}: a FIFO, not a regular file")
    ended = run_ended(failed, run, "auto")
    assert ended is not None
    assert str(ended) == f"{run / 'metrics.jsonl'}: a FIFO, not a regular file"
    (run / "metrics.jsonl").unlink()  # a full disk, with a run dir the next run takes
    ended = run_ended(
        OSError(errno.ENOSPC, "No space left on device", str(run / "metrics.jsonl")), run, "auto"
    )
    assert str(ended).endswith(
        f"the newest checkpoint is {run / 'global_step_2'}: run the same command again to"
        " resume from it"
    )


def test_a_save_cut_short_says_what_it_left_on_disk(tmp_path):
    """Ranks killed with their launcher leave `global_step_4.tmp`: it is named, never said
    to be removed; a save whose ranks removed it is said to be removed."""
    run = tmp_path / "run"
    _saved_run(run, 4, 3)
    cut = run / "global_step_4.tmp" / "dist_ckpt"
    cut.mkdir(parents=True)
    resume = f"the newest checkpoint is {run / 'global_step_3'}: run the same command again"
    line = interrupted_run(_cfg(run, "checkpoint.save_every=1"), 0, "stopped")
    assert line == (
        f"stopped after step 4 (step 4's save was cut short; what it wrote is left in"
        f" {run / 'global_step_4.tmp'}, no checkpoint); {resume} to resume from it"
    )
    cut.rmdir()
    cut.parent.rmdir()
    line = interrupted_run(_cfg(run, "checkpoint.save_every=1"), 0, "stopped")
    assert line == (
        f"stopped after step 4 (step 4's save was cut short and removed); {resume} to resume"
        " from it"
    )
