"""The trainer state a checkpoint holds, checked before a resume trusts any of it.

A run continues from the step its checkpoint's trainer state (`extra`) records, and places
its data by the numbers beside it. Those are bytes in the checkpoint like any other: a
`global_step_2` whose state said step -5 resumed "steps -5 -> 3", kept its config as
`config.until_step_-5.yaml`, emptied metrics.jsonl and ended in a ZeroDivisionError; one
whose state said step 1 trained step 2 again and saved over it. The step a checkpoint is
at is known three ways where mfsdp wrote it (its directory's name, its manifest, its
state): all must agree, before the run changes a file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mfsdp_ckpt.check.validate import CheckpointInvalidError
from mfsdp_ckpt.format.layout import CheckpointPaths
from mfsdp_ckpt.format.manifest import Manifest
from mfsdp_ckpt.format.trainer_state import STEP, missing_fields, state_problems

_REFUSED = "refusing to resume from it (damaged or edited)"


def check_trainer_state(
    progress: Mapping[str, Any], found: CheckpointPaths, manifest: Manifest | None
) -> None:
    """CheckpointInvalidError (exit 1, one line naming the checkpoint) unless the loaded
    trainer state `progress` holds every field a resume reads, each meeting its rule
    (`mfsdp_ckpt.format.trainer_state`, which validate applies too), and its step equals
    the step of the checkpoint's directory (`found.step`: `global_step_N`) and of its
    manifest, where it has them. A field the checkpoint lacks is not in `progress` (the
    load leaves out what it does not hold): it was a KeyError traceback."""
    where = found.step_dir or found.dist_ckpt
    missing = missing_fields(progress)
    if missing:
        raise CheckpointInvalidError(
            f"{where}: its trainer state has no extra.{missing[0]}; {_REFUSED}"
        )
    problems = state_problems(progress)
    if problems:
        raise CheckpointInvalidError(f"{where}: its trainer state {problems[0]}; {_REFUSED}")
    step = progress[STEP]
    named = {"its directory": found.step, "its manifest": manifest.step if manifest else None}
    disagrees = next(
        (f"{what} says step {n}" for what, n in named.items() if n is not None and n != step),
        "",
    )
    if disagrees:
        raise CheckpointInvalidError(
            f"{where}: its trainer state says step {step}, but {disagrees}; {_REFUSED}:"
            " give checkpoint.resume=PATH of another step, or a new trainer.run_dir"
        )
