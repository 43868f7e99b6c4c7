"""`trainer.rollout_data_dir` and `trainer.validation_data_dir`, checked at config load, before
the model is built.

The directory was otherwise made at the first dump, after a whole step: a file there, a
symlink loop or a dangling link (or /dev/full) failed then as "cannot make the directory
(File exists)", the model load and the step lost. Two more settings lost dumps without a
word: both keys naming one directory (each file is `<step>.jsonl`, verl's name for both, so
step N's validation replaced its training samples; verl does the same), and a directory
inside a checkpoint step of the run (`RUN/global_step_N`), which the step's save replaces
whole, deleting the dumps in it, or which the dumps add unlisted files to. Inside the run
dir but outside its step dirs is fine (`RUN/generations`). Nothing is created here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mfsdp_ckpt.format import finding_runs, layout
from trainer.config import ConfigError
from trainer.local_paths import check_writable_dir

DUMP_KEYS = ("rollout_data_dir", "validation_data_dir")


def check_dump_dirs(trainer: Any) -> None:
    """Each dump dir `trainer` (a GRPO config's trainer section) sets can be written, is no
    other one, and lies outside every checkpoint; else one line naming the key."""
    given = {
        f"trainer.{key}": getattr(trainer, key)
        for key in DUMP_KEYS
        if getattr(trainer, key, None) is not None
    }
    for key, value in given.items():
        check_writable_dir(key, value)
        _refuse_inside_a_checkpoint(key, value, trainer.run_dir)
    if len(given) == 2 and len({os.path.realpath(v) for v in given.values()}) == 1:
        (rollout, val) = given.values()
        raise ConfigError(
            f"trainer.rollout_data_dir {rollout} and trainer.validation_data_dir {val} are one"
            " directory: both write <step>.jsonl, so each step's validation file would replace"
            " its training one; give them different directories"
        )


def _refuse_inside_a_checkpoint(key: str, value: str, run_dir: str) -> None:
    """`value` is not a step dir of the run (`run_dir`/global_step_N, saved yet or not) or
    inside one, nor inside any other checkpoint on disk."""
    dump, run = Path(os.path.realpath(value)), Path(os.path.realpath(run_dir))
    inside: Path | None = None
    if run in dump.parents:
        first = dump.relative_to(run).parts[0]
        if first.startswith(layout.STEP_DIR_PREFIX):
            inside = run / first
    inside = inside or finding_runs.checkpoint_containing(dump, run_itself=False)
    if inside is not None:
        raise ConfigError(
            f"{key}: {value} is or lies inside the checkpoint {inside}, which a save"
            " replaces whole (deleting the dumps) or which they would add files to; give a"
            f" directory outside the step dirs (e.g. {run / 'generations'})"
        )
