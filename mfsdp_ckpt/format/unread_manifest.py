"""Why the manifest.json of the step a dist_ckpt/ lies in went unread: damaged (bad JSON, a
directory or FIFO in its place, denied) or written by a newer mfsdp, in a `global_step_N`
or in a step copied under a name that is no step's (`best/`). Its file hashes were then not
checked, and each line that says so says why: "no manifest" hid that one is there, and a
verdict that named no manifest at all hid that nothing checked the hashes."""

from __future__ import annotations

import os
from pathlib import Path

from mfsdp_ckpt.format.layout import DIST_CKPT_DIR, MANIFEST_FILE, MFSDP
from mfsdp_ckpt.format.manifest import ManifestError, read_manifest


def unread_manifest(dist_ckpt: Path, kind: str | None) -> tuple[Path, str] | None:
    """(the manifest.json beside `dist_ckpt`, why it cannot be read) where `dist_ckpt`, read
    as layout `kind`, is mfsdp's `dist_ckpt/`; None where there is none (a bare dist_ckpt
    indeed, another trainer's layout) or it reads."""
    manifest = dist_ckpt.parent / MANIFEST_FILE
    if kind != MFSDP or dist_ckpt.name != DIST_CKPT_DIR:
        return None
    if not os.path.lexists(manifest):
        return None
    try:
        read_manifest(manifest)
    except (ManifestError, OSError, ValueError) as err:
        return manifest, str(err).removeprefix(f"{manifest}: ")
    return None
