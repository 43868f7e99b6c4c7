"""A run that a full disk ends (the metrics log, a save) says, after what failed, which
checkpoint the next run resumes from and how, as a rank killed mid-run says it. Was:
`error: run/metrics.jsonl: No space left on device` alone, 25 steps after the last save."""

from __future__ import annotations

import errno
import subprocess
import sys
from pathlib import Path

import torch

from mfsdp_ckpt.checkpoint_failures import CheckpointSaveError, TrackerNotUpdatedError
from mfsdp_ckpt.checkpointer import Checkpointer
from tests.support.paths import EXAMPLES, repo_env
from trainer.grpo.synthetic import write_addition_data
from trainer.run_ended import run_ended

# `mfsdp train sft` whose metrics log finds the disk full from step FULL_AT on
FULL_FROM_A_STEP = """
import errno, json, sys
import trainer.metrics as metrics
appended, full_at = metrics.append_whole, int(sys.argv[1])

def append_whole(path, line):
    if json.loads(line)["step"] >= full_at:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))
    appended(path, line)

metrics.append_whole = append_whole
from cli.main import main
sys.argv = ["mfsdp", "train", "sft", *sys.argv[2:]]
main()
"""


def test_the_metrics_log_on_a_full_disk_names_the_newest_checkpoint(tmp_path):
    table = write_addition_data(tmp_path / "data", seed=0, digits=10)["sft"]
    done = subprocess.run(
        [sys.executable, "-c", FULL_FROM_A_STEP, "5", "--config"]
        + [str(EXAMPLES / "sft_tiny_cpu.yaml"), f"data.train_files={table}"]
        + ["trainer.run_dir=run", "trainer.total_steps=6", "checkpoint.save_every=2"]
        + ["trainer.eval_every=0", "trainer.progress_bar=false"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**repo_env(), "OMP_NUM_THREADS": "1"},
    )
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: run/metrics.jsonl: No space left on device; the newest checkpoint is"
        " run/global_step_4: run the same command again to resume from it"
    ], done.stderr
    assert done.returncode == 1


def test_a_failed_save_names_the_newest_checkpoint_and_how_to_resume(tmp_path):
    run = tmp_path / "run"
    Checkpointer(run, strategy="none").save(2, {"model": {"w": torch.ones(2)}}, contents=("model",))
    failed = CheckpointSaveError(f"{run}/global_step_4.tmp: saving step 4 failed: disk full")
    assert str(run_ended(failed, run, "disable")) == (
        f"{failed}; the newest checkpoint is {run}/global_step_2:"
        " run it again with checkpoint.resume=auto to resume from it"
    )
    disk = OSError(errno.EDQUOT, "Disk quota exceeded", str(tmp_path / "fresh" / "x"))
    assert str(run_ended(disk, tmp_path / "fresh", "auto")) == (
        f"{tmp_path}/fresh/x: Disk quota exceeded; no checkpoint was saved in {tmp_path}/fresh yet"
    )


def test_what_says_itself_is_left_as_it_is(tmp_path):
    """An interrupt, memory and a tracker not updated (its line says how to resume)."""
    tracker = TrackerNotUpdatedError("run/latest: step 4 was saved ...; give checkpoint.resume=")
    for err in (KeyboardInterrupt(), OSError(errno.ENOMEM, "Cannot allocate memory"), tracker):
        assert run_ended(err, Path(tmp_path), "auto") is None
