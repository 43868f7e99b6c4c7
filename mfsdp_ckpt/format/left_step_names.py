"""The names a run dir holds a step under while it is no checkpoint to read.

A save writes `global_step_N.tmp/` and renames it to `global_step_N/` once its manifest is
written; `checkpoint.keep_last` renames an old step to `.global_step_N.removing-PID/` and
then deletes it (`retention`). Either dir may look whole or hold any part of a step, and
no manifest vouches for what is left: a leftover of a stopped removal given by path was
"valid", exported and resumed, even half deleted, while the `.tmp` beside it was refused.
Every command and key that takes a checkpoint path resolves it
(`checkpoint_resolution.resolve_checkpoint`), which refuses both names here, by one rule.
"""

from __future__ import annotations

import re
from pathlib import Path

from mfsdp_ckpt.format.layout import STEP_DIR_PREFIX, TMP_STEP_RE, CheckpointPathError


class LeftStepError(CheckpointPathError):
    """A path that names a step only while it is no checkpoint (`refuse_left_step`): a key
    that reads a Hugging Face dir too (`model.path`) names this refusal as it is, never as
    what else the dir might be."""


REMOVING_TAG = ".removing-"  # `.global_step_N.removing-<pid>`: a step being deleted
REMOVING_STEP_RE = re.compile(
    rf"^\.{re.escape(STEP_DIR_PREFIX)}([0-9]+){re.escape(REMOVING_TAG)}[0-9]+\Z"
)


def left_step_line(name: str) -> str | None:
    """What a dir named `name` is when its name is one a step has only while it is no
    checkpoint (an unfinished save, a stopped removal), in words; None for any other name."""
    saving = TMP_STEP_RE.match(name)
    if saving:
        step = saving.group(1)
        return (
            f"an unfinished save of step {step} (renamed to {STEP_DIR_PREFIX}{step}/ only"
            " once complete)"
        )
    removing = REMOVING_STEP_RE.match(name)
    if removing:
        return (
            f"an old step {removing.group(1)} whose removal by checkpoint.keep_last was stopped;"
            " not a checkpoint (the run's next save removes it)"
        )
    return None


def refuse_left_step(given: Path) -> None:
    """LeftStepError when `given` or the dir holding it (its `dist_ckpt/`, its
    `huggingface/`) is named as a step that is no checkpoint (`left_step_line`): one line
    naming the run dir to give instead, whose complete steps are read."""
    for level in (given, given.parent):
        line = left_step_line(level.name)
        if line is not None:
            raise LeftStepError(f"{given}: {line}; give the run dir {level.parent}")
