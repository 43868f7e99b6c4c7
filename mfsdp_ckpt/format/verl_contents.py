"""verl's ckpt_contents.json, read bounded and as JSON data only.

Both the resolution of a verl v2 role dir and the refusal of verl's LoRA save read it, so
a hostile or broken file is refused the same way, in one line, wherever it is met: as a
checkpoint whose content is broken (exit 1), as a damaged tracker or manifest is. verl
writes the file through a temporary file, fsync and rename, so a broken one is damage on
disk, not a path that names no checkpoint (it was exit 2, bad usage).
"""

from __future__ import annotations

from pathlib import Path

from mfsdp_ckpt.errors import MfsdpFailedError
from mfsdp_ckpt.format.layout import CONTENTS_MAX_BYTES, VERL_CONTENTS_FILE
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.unique_json import loads_object


class VerlContentsError(MfsdpFailedError, ValueError):
    """A verl step's ckpt_contents.json that is no JSON object, or no regular file of a
    bounded size; `file` names it, for a report that lists it as a finding."""

    def __init__(self, message: str, file: Path | None = None) -> None:
        super().__init__(message)
        self.file = file


def read_verl_contents(role_dir: Path) -> dict:
    """verl's ckpt_contents.json (schema 2), bounded and read only as JSON data."""
    file = role_dir / VERL_CONTENTS_FILE
    try:
        text = safe_files.read_text(file, CONTENTS_MAX_BYTES, root=role_dir)
        return loads_object(text, str(file), VerlContentsError)
    except (CheckpointFileError, VerlContentsError) as err:
        raise VerlContentsError(str(err), file) from None
