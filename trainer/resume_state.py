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

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.check.validate import CheckpointInvalidError
from mfsdp_ckpt.format.layout import CheckpointPaths
from mfsdp_ckpt.format.manifest import Manifest

STEP = "step"


def check_trainer_state(
    progress: Mapping[str, Any], found: CheckpointPaths, manifest: Manifest | None
) -> None:
    """CheckpointInvalidError (exit 1, one line naming the checkpoint) unless every number
    of the loaded trainer state `progress` is an int, and its step a non-negative one equal
    to the step of the checkpoint's directory (`found.step`: `global_step_N`) and of its
    manifest, where it has them."""
    where = found.step_dir or found.dist_ckpt
    for key, value in progress.items():
        if not _is_int(value):
            raise CheckpointInvalidError(
                f"{where}: its trainer state holds {key}={cut_to(repr(value), 40)}, not an integer;"
                " refusing to resume from it (damaged or edited)"
            )
    step = progress[STEP]
    named = {"its directory": found.step, "its manifest": manifest.step if manifest else None}
    if step < 0:
        disagrees = "a step is 0 or more"
    else:
        disagrees = next(
            (f"{what} says step {n}" for what, n in named.items() if n is not None and n != step),
            "",
        )
    if disagrees:
        raise CheckpointInvalidError(
            f"{where}: its trainer state says step {step}, but {disagrees}; refusing to"
            " resume from it (damaged or edited): give checkpoint.resume=PATH of another step,"
            " or a new trainer.run_dir"
        )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
