"""A model dir as huggingface_hub's `--local-dir` download laid it out before 0.23: links
into the Hugging Face cache's blobs/, built from a tiny model dir in the test's tmp_path."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def local_dir_of_links(model: Path, hub: Path, relative: bool = False) -> Path:
    """`model`'s files copied into a fake cache under `hub` (models--org--tiny/blobs/SHA256)
    and `hub/../local` made of links to them, as `--local-dir` with symlinks lays it out."""
    blobs = hub / "models--org--tiny" / "blobs"
    blobs.mkdir(parents=True)
    local = hub.parent / "local"
    local.mkdir()
    for file in sorted(model.iterdir()):
        data = file.read_bytes()
        blob = blobs / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (local / file.name).symlink_to(os.path.relpath(blob, local) if relative else blob)
    return local
