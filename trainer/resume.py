"""Resume a run where its newest checkpoint left off, and refuse when that would be wrong.

Every runner (SFT, GRPO) places data by the step alone: a step's rows are a function of
(global batch size, number of training rows, seed, step) (`trainer.data.batching`). So a
checkpoint stores just those numbers next to the weights and optimizer, and resume is: load
them, then check that this run would map steps to the same rows. One place does this so the
runners cannot drift apart in what they check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.layout import CheckpointPaths

DATA_POSITION_KEYS = ("global_batch_size", "train_rows", "seed")


class ResumeMismatchError(ValueError):
    """The checkpoint to resume was trained with data settings that place steps differently."""


def new_progress(global_batch_size: int, train_rows: int, seed: int) -> dict[str, int]:
    """The checkpoint's `extra` state: the step plus what places a step's data."""
    return {"step": 0, "global_batch_size": global_batch_size, "train_rows": train_rows, "seed": seed}


def resume_if_any(checkpointer: Checkpointer, resume: str, states: dict[str, Any]) -> CheckpointPaths | None:
    """Load the checkpoint `resume` names ("auto", "disable" or a path) into `states`.

    `states["extra"]` is the run's progress dict (`new_progress`); after the load it holds the
    checkpoint's step. Returns the checkpoint loaded, or None when the run starts fresh.
    """
    found = checkpointer.find_resume(resume)
    if found is None:
        return None
    progress = states["extra"]
    expected = dict(progress)
    checkpointer.load(found, states)
    check_data_position(expected, progress, found.dist_ckpt)
    return found


def check_data_position(expected: dict[str, Any], restored: dict[str, Any], where: Path) -> None:
    """Raise ResumeMismatchError when the checkpoint's steps would map to other data in this run."""
    for key in DATA_POSITION_KEYS:
        if int(restored[key]) != int(expected[key]):
            raise ResumeMismatchError(
                f"{where}: checkpoint was trained with {key}={restored[key]}, this run has {expected[key]}; "
                "steps would map to different data (use checkpoint.resume=disable to start over)"
            )
