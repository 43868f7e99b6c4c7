"""Whether the manifest.json beside a `dist_ckpt/` is mfsdp's, in a dir whose name says
nothing (a step copied as `best/`, `ck/`).

A step of ours is ours whatever it is called: its manifest is read by the rule of a
`global_step_N` (damage refused naming the file, a newer mfsdp's "upgrade mfsdp"), or
its file hashes go unchecked and flipped tensor bytes pass `validate --deep`. Another
tool may keep a manifest.json of its own there, though, and that one leaves the dir a
bare dist_ckpt. One that reads as JSON tells which it is by mfsdp's own fields; one that
cannot be read (bad JSON, a directory or FIFO in its place, denied) tells nothing, and is
taken as damage of ours: mfsdp's layout is the one that writes a manifest.json beside a
`dist_ckpt/`. An empty file claims nothing.
"""

from __future__ import annotations

from pathlib import Path

from mfsdp_ckpt.errors import MfsdpError
from mfsdp_ckpt.format.manifest import MAX_MANIFEST_BYTES, MAX_MANIFEST_CONTAINERS
from mfsdp_ckpt.format.manifest_digest import DIGEST_FIELD
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.unique_json import parse_json

# fields every manifest mfsdp writes holds, and no other tool's is known to
OWN_FIELDS = ("format_version", DIGEST_FIELD)


def is_mfsdp_manifest(manifest: Path) -> bool:
    """Whether `manifest` (which is there) is mfsdp's, damaged or not (module docstring)."""
    try:
        text = safe_files.read_text(manifest, MAX_MANIFEST_BYTES, root=manifest.parent)
    except (MfsdpError, OSError):
        return True  # no regular file, denied, not text: nothing says another tool's
    if not text.strip():
        return False
    try:
        data = parse_json(text, str(manifest), ValueError, MAX_MANIFEST_CONTAINERS)
    except ValueError:
        return True
    return isinstance(data, dict) and any(field in data for field in OWN_FIELDS)
