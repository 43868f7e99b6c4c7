"""Whether a step-named dir holds any piece of a save: the one judgement of "a save that
did not finish" against "a dir named like a step that is no save at all".

A run's step lists (`run_steps`), a tracker naming a step (mfsdp's run dir or another
trainer's) and a step given directly all ask here, so a Hugging Face model or an adapter
left under `global_step_N/` keeps its own line (exit 2) everywhere: called "a save that
did not finish" in mfsdp's run dirs alone, the user was sent to look for a save never made.
Its own module because `run_steps` and `unfinished_steps` both need it and the second
imports the first.
"""

from __future__ import annotations

from pathlib import Path

from mfsdp_ckpt.format.dir_entries import children, is_dir
from mfsdp_ckpt.format.layout import (
    DCP_METADATA_FILE,
    DIST_CKPT_DIR,
    ROLES,
    VERL_CONTENTS_FILE,
    VERL_MODEL_DIR,
    CheckpointPathError,
)
from mfsdp_ckpt.format.unfinished_torch_dist import LEGACY_COMMON_FILE
from mfsdp_ckpt.storage.byte_store import CheckpointFileError

# What a save of a known layout writes into a step dir (or a role dir of one) before the
# file it writes last: DCP's shards and `.metadata`, megatron-core's common.pt, verl's
# `ckpt_contents.json`, `dist_ckpt/` and `model/`
_SAVE_FILES = frozenset({DCP_METADATA_FILE, VERL_CONTENTS_FILE, LEGACY_COMMON_FILE})
_SAVE_DIRS = frozenset({DIST_CKPT_DIR, VERL_MODEL_DIR})
_SHARD_SUFFIX = ".distcp"


def holds_save_pieces(step: Path) -> bool:
    """Whether the step dir `step` is empty or holds what a save of a known layout writes
    before its last file (`_SAVE_FILES`, `_SAVE_DIRS`, a `.distcp` shard, a role dir that
    is empty or holds them): a save that did not finish, where its last file is missing.
    A dir named like a step holding a Hugging Face model, a PEFT adapter, a config.json
    alone or unrelated files is no save at all. False where `step` cannot be listed:
    reading it names it."""
    try:
        names = children(step)
        return not names or any(_is_save_piece(step / name, roles=True) for name in names)
    except (CheckpointPathError, CheckpointFileError):
        return False


def _is_save_piece(path: Path, roles: bool) -> bool:
    name = path.name
    if name in _SAVE_FILES or name.endswith(_SHARD_SUFFIX):
        return True
    if not is_dir(path):
        return False
    if name in _SAVE_DIRS:
        return True
    if not (roles and name in ROLES):
        return False
    inside = children(path)
    return not inside or any(_is_save_piece(path / entry, roles=False) for entry in inside)
