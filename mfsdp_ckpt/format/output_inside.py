"""How an output path a command was given is, or lies in, a checkpoint: the words its
refusal uses, so that every command that writes an `--out` refuses one in the same terms.

Files written there would be mixed into the checkpoint (validate then reports files no
manifest lists), or a run's next save would land among them. `finding_runs.checkpoint_containing`
decides what counts; a step of a run that is not saved yet counts too (its saves write there).
"""

from __future__ import annotations

import os
from pathlib import Path

from mfsdp_ckpt.format.finding_runs import (
    checkpoint_containing,
    named_as_given,
    unsaved_step_words,
)


def inside_checkpoint(out: str | os.PathLike, given: str | os.PathLike | None = None) -> str | None:
    """`is a checkpoint or a training run's dir`, `lies inside the checkpoint STEP`, or the
    words for a step still to be saved, for an `out` that is or lies in one; None otherwise.
    The checkpoint is named as `given` (the --out as typed, where `out` is its resolved
    form) or `out` names it: relative where that was."""
    absolute = Path(os.path.abspath(out))
    inside = checkpoint_containing(absolute)
    if inside is None:
        return None
    typed = out if given is None else given
    if inside == absolute:
        return unsaved_step_words(typed, inside) or "is a checkpoint or a training run's dir"
    shown = named_as_given(inside, typed)
    return unsaved_step_words(typed, inside) or f"lies inside the checkpoint {shown}"


__all__ = ["inside_checkpoint"]
