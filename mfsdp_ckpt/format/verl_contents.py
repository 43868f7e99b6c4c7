"""verl's ckpt_contents.json, read bounded and as JSON data only.

Both the resolution of a verl v2 role dir and the refusal of verl's LoRA save read it, so
a hostile or broken file is refused the same way, in one line, wherever it is met.
"""

from __future__ import annotations

from pathlib import Path

from mfsdp_ckpt.format.layout import CONTENTS_MAX_BYTES, VERL_CONTENTS_FILE, CheckpointPathError
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.unique_json import loads_object


def read_verl_contents(role_dir: Path) -> dict:
    """verl's ckpt_contents.json (schema 2), bounded and read only as JSON data."""
    file = role_dir / VERL_CONTENTS_FILE
    try:
        text = safe_files.read_text(file, CONTENTS_MAX_BYTES, root=role_dir)
    except CheckpointFileError as err:
        raise CheckpointPathError(str(err)) from None
    return loads_object(text, str(file), CheckpointPathError)
