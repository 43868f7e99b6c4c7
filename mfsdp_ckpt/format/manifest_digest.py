"""manifest.json's digest of its own content.

A manifest records a digest of every file of its step, but its own fields were covered by
nothing: one flipped bit that turned a LoRA run's `"lora_alpha": 16` into 36 still read as a
valid manifest, `validate --deep --strict` passed it, and export merged the adapter at 9/4
of its trained scale. So the manifest also records, in `manifest_digest`, a digest of
everything else it holds: XXH3-128 (as its files) of the canonical JSON of those fields
(keys sorted, no whitespace, ASCII escapes), with the canonical text's length as its
`size`, in the form a file record has. Canonical JSON of the parsed fields, not the file's
bytes: a reader recomputes it from what it parsed, so the check speaks of the values
every reader uses, whatever the file's indentation.

Like the file digests, it finds accidental damage (a flipped bit, a torn edit), not a
forger: whoever rewrites a field can rewrite the digest. A manifest written before it has
none and is read as before, with no claim made for its fields.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from mfsdp_ckpt.format.file_hash import FileRecord, FileRecordError, hash_bytes

DIGEST_FIELD = "manifest_digest"


def _canonical(fields: Mapping[str, Any]) -> bytes:
    """The canonical JSON of every field but the digest. `json.dumps` recurses once per
    level: a manifest read back is no deeper than `unique_json.MAX_JSON_DEPTH`, far inside
    Python's recursion limit, so a hostile one is refused as it is parsed, never here."""
    content = {key: value for key, value in fields.items() if key != DIGEST_FIELD}
    return json.dumps(content, sort_keys=True, separators=(",", ":")).encode("ascii")


def sealed(fields: Mapping[str, Any]) -> dict[str, Any]:
    """`fields` (the manifest as JSON values) with their digest in DIGEST_FIELD. Taken over
    the fields as a reader parses them back (tuples are lists there, integer keys strings),
    so that the reader's digest is the writer's."""
    as_read = json.loads(_canonical(fields))
    return {**fields, DIGEST_FIELD: hash_bytes(_canonical(as_read)).to_json()}


def digest_problem(fields: Mapping[str, Any]) -> str | None:
    """What is wrong with a parsed manifest's digest of itself, in words, or None: it
    matches, or the manifest was written before manifests recorded one."""
    if DIGEST_FIELD not in fields:
        return None
    try:
        recorded = FileRecord.from_json(fields[DIGEST_FIELD])
    except FileRecordError as err:
        return f"field {DIGEST_FIELD!r} {err}"
    if hash_bytes(_canonical(fields), recorded.algorithm) != recorded:
        return (
            f"its fields differ from its {DIGEST_FIELD} (changed after it was written:"
            " damaged or edited)"
        )
    return None
