"""Megatron-Bridge's two trackers, read together: the step its load follows, and what the
other one names when the two differ.

Bridge's save_checkpoint writes `latest_train_state.pt` (a copy of the step's
train_state.pt) and then, for Megatron-LM's tools, `latest_checkpointed_iteration.txt`;
its load (`_get_checkpoint_iteration`) reads `latest_train_state.pt` whenever it is there
and the .txt only without it. A run stopped between the two writes, a tracker set back by
hand, or Megatron-LM saving into the same dir leaves them naming different steps: the step
read is `latest_train_state.pt`'s, as Bridge resumes, and the .txt's is said beside it,
never dropped silently (Megatron-LM's --load reads the .txt).
"""

from __future__ import annotations

from pathlib import Path

from mfsdp_ckpt.format.dir_entries import is_dir
from mfsdp_ckpt.format.layout import (
    BRIDGE_TRACKER_FILE,
    MEGATRON_ITER_PREFIX,
    MEGATRON_RELEASE_DIR,
    TRACKER_FILE,
    DamagedRunDirError,
)
from mfsdp_ckpt.format.run_steps import read_tracker_text


def other_tracker_note(run: Path, tracked: str) -> str | None:
    """The note for a Bridge run whose `latest_train_state.pt` names step `tracked` (the
    step read) while its `latest_checkpointed_iteration.txt` names another, holds
    `release` or cannot be read; None when the .txt is absent or names the same step."""
    txt = run / TRACKER_FILE
    try:
        other = read_tracker_text(run)
    except DamagedRunDirError as err:
        return (
            f"{err}; left unread, as Megatron-Bridge's load leaves it: reading step {tracked},"
            f" which {run / BRIDGE_TRACKER_FILE} names"
        )
    if other is None or _same_step(other, tracked):
        return None
    named = _named(other)
    target = run / _step_dir_name(other)
    give = f": give {target} to read that one" if is_dir(target) else ""
    return (
        f"{run / BRIDGE_TRACKER_FILE} names step {tracked}, but {txt} {named}: reading step"
        f" {tracked}, the one Megatron-Bridge's load resumes (it reads {BRIDGE_TRACKER_FILE}"
        f" first, the .txt only without it; Megatron-LM's --load reads the .txt){give}"
    )


def other_tracker_suffix(run: Path, tracked: str | None) -> str:
    """What a refusal of a Bridge run's tracked step adds about the .txt: ` (RUN/latest_
    checkpointed_iteration.txt names step 10, which Megatron-Bridge's load reads only
    without latest_train_state.pt)` when it names another step than `tracked` (None: the
    .pt could not be read), else nothing. A .txt that cannot be read adds nothing: the
    refusal is of the file Bridge reads."""
    try:
        other = read_tracker_text(run)
    except DamagedRunDirError:
        return ""
    if other is None or _same_step(other, tracked):
        return ""
    return (
        f" ({run / TRACKER_FILE} {_named(other)}, which Megatron-Bridge's load reads only"
        f" without {BRIDGE_TRACKER_FILE})"
    )


def _same_step(other: str, tracked: str | None) -> bool:
    """The .txt's text `other` names the step `tracked` does (`0020` is step 20)."""
    if other == MEGATRON_RELEASE_DIR or tracked is None:
        return False
    return int(other) == int(tracked)


def _named(text: str) -> str:
    return "names 'release'" if text == MEGATRON_RELEASE_DIR else f"names step {text}"


def _step_dir_name(text: str) -> str:
    """The step dir a tracker's text names in a Megatron run: release/ or iter_NNNNNNN/."""
    if text == MEGATRON_RELEASE_DIR:
        return MEGATRON_RELEASE_DIR
    return f"{MEGATRON_ITER_PREFIX}{int(text):07d}"


__all__ = ["other_tracker_note", "other_tracker_suffix"]
