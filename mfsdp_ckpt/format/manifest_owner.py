"""Whether the manifest.json beside a `dist_ckpt/` is mfsdp's, in a dir whose name says
nothing (a step copied as `best/`, `ck/`).

A step of ours is ours whatever it is called: its manifest is read by the rule of a
`global_step_N` (damage refused naming the file, a newer mfsdp's "upgrade mfsdp"), or
its file hashes go unchecked and flipped tensor bytes pass `validate --deep`. Another
tool may keep a manifest.json of its own there, though, and that one leaves the dir a
bare dist_ckpt, however it is written (duplicate keys, comments, a byte-order mark,
UTF-16: no reason to refuse a step mfsdp did not write). So the file claims to be ours
only by what mfsdp writes: its digest field (every manifest since the digest came), or
half the names of the fields every manifest of ours holds (names survive most damage, a
flipped byte that breaks the JSON or the UTF-8 included), or, read as JSON, all of them.
A manifest.json that cannot be read at all (a directory or FIFO in its place, denied)
tells nothing, and is taken as damage of ours: mfsdp's layout is the one that writes a
manifest.json beside a `dist_ckpt/`.
"""

from __future__ import annotations

import json
from pathlib import Path

from mfsdp_ckpt.errors import MfsdpError
from mfsdp_ckpt.format.manifest import MAX_MANIFEST_BYTES
from mfsdp_ckpt.format.manifest_digest import DIGEST_FIELD
from mfsdp_ckpt.storage import safe_files

# fields every manifest mfsdp writes holds (`Manifest._from_dict` needs each)
OWN_FIELDS = frozenset({"format_version", "step", "world_size", "strategy", "contents", "files"})


def is_mfsdp_manifest(manifest: Path) -> bool:
    """Whether `manifest` (which is there) is mfsdp's, damaged or not (module docstring)."""
    try:
        raw = safe_files.read_bytes(manifest, MAX_MANIFEST_BYTES, root=manifest.parent)
    except (MfsdpError, OSError):
        return True  # no regular file, denied, too large: nothing says another tool's
    named = [field for field in (DIGEST_FIELD, *OWN_FIELDS) if f'"{field}"'.encode() in raw]
    if DIGEST_FIELD in named or len(named) >= len(OWN_FIELDS) // 2:
        return True
    try:  # as any JSON reader takes it: only what it holds decides
        data = json.loads(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and data.keys() >= OWN_FIELDS
