"""Megatron's per-parameter optimizer group settings, said as one line by inspect.

Megatron's distributed optimizer saves, beside each parameter's states, the settings of the
parameter group it was in: `optimizer.param_to_group_meta.<param>.<lr|betas|eps|
weight_decay|...>`, ~20 small non-tensor entries per parameter (84,000 for a model of 4,000
parameters, ~400,000 for a Qwen3-30B-A3B whose experts are each a parameter). Listed one a
line they bury the rest of inspect's output, and one a line say little: which group each
parameter was in. So inspect shows each such entry as one: how many entries for how many
parameters, and the distinct groups, by the settings that tell them apart and the
parameters each holds.

The values are read as validate's pickle scan reads the blobs, a run of neighbours at a time
(`blob_runs`), and each distinct blob is decoded once, as torch's weights-only load of
plain values does, without importing torch (`plain_blob`; a DCP save writes equal values
as equal bytes: a few distinct ones in all).
A checkpoint of more than MAX_DISTINCT_BLOBS distinct ones is counted, not summarised: the
line stays bounded in time whatever the blobs hold.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable

from mfsdp_ckpt.check.blob_runs import small_blobs
from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.storage.blob_decode import load_blob
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.reader import CheckpointReader, ObjectEntry

GROUP_META = "param_to_group_meta"
MAX_DISTINCT_BLOBS = 1024  # decoded to tell groups apart; real checkpoints hold a few
MAX_SHOWN_GROUPS = 4
MAX_SHOWN_SETTINGS = 4
_FIRST_SETTINGS = ("lr", "weight_decay", "betas", "eps")  # said first: what users set


def group_meta_root(name: str) -> str | None:
    """`optimizer.param_to_group_meta` (or a chained optimizer's `optimizer.0.
    param_to_group_meta`) for an entry under it, else None."""
    before, found, _rest = name.partition(f".{GROUP_META}.")
    return f"{before}.{GROUP_META}" if found else None


def summarise(reader: CheckpointReader, root: str, entries: list[ObjectEntry]) -> dict:
    """`entries` (all under `root`) as one inspect object: its name, kind and bytes as any
    entry's, and the note saying the parameters and their groups."""
    settings: dict[str, dict[str, str]] = {}  # parameter -> setting -> value, as repr
    values: dict[bytes, str | None] = {}  # a distinct blob's digest -> its value, as repr
    decoded = 0  # blobs larger than a run's, or without storage, are no real settings
    for entry, raw in small_blobs(reader, entries):
        value = None if isinstance(raw, CheckpointFileError) else _value(reader, entry, raw, values)
        if value is not None:
            decoded += 1
            parameter, _, setting = _split(root, entry.name)
            settings.setdefault(parameter, {})[setting] = value
    parameters = len({_split(root, entry.name)[0] for entry in entries})
    note = f"{len(entries)} entries for {parameters} parameters"
    if len(values) > MAX_DISTINCT_BLOBS:
        note += f": more than {MAX_DISTINCT_BLOBS} distinct values, groups not told apart"
    elif settings:
        note += f": {_groups(settings)}"
    if decoded < len(entries):
        note += f" ({len(entries) - decoded} not decoded)"
    return {
        "name": root,
        "kind": "group settings",
        "bytes": sum(entry.length for entry in entries),
        "value": None,
        "not_decoded": None,
        "note": note,
    }


def _split(root: str, name: str) -> tuple[str, str, str]:
    """(parameter, ".", setting) of an entry's name under `root`."""
    return name[len(root) + 1 :].rpartition(".")


def _value(
    reader: CheckpointReader, entry: ObjectEntry, raw: bytes, values: dict[bytes, str | None]
) -> str | None:
    """The repr of the value `raw` holds, decoded once per distinct blob; None when it
    cannot be decoded, or past MAX_DISTINCT_BLOBS distinct ones."""
    digest = hashlib.sha256(raw).digest()
    if digest not in values:
        if len(values) > MAX_DISTINCT_BLOBS:
            return None
        try:
            values[digest] = repr(load_blob(raw, entry.transforms, f"{reader.root} [{entry.name}]"))
        except (CheckpointFormatError, CheckpointFileError):
            values[digest] = None
    return values[digest]


def _groups(settings: dict[str, dict[str, str]]) -> str:
    """The distinct groups, most parameters first: by the settings that differ between them
    (one group: its first few settings)."""
    groups = Counter(tuple(sorted(held.items())) for held in settings.values())
    if len(groups) == 1:
        ((group, _count),) = groups.items()
        return f"one group for all ({_said(dict(group), set(dict(group)))})"
    varying = {
        name
        for group in groups
        for name, value in group
        if any(dict(other).get(name) != value for other in groups)
    }
    shown = [
        f"{_said(dict(group), varying)} ({count} parameters)"
        for group, count in groups.most_common(MAX_SHOWN_GROUPS)
    ]
    more = len(groups) - len(shown)
    return f"{len(groups)} groups: " + "; ".join(shown) + (f"; +{more} more" if more else "")


def _said(group: dict[str, str], names: set[str]) -> str:
    """`lr=1e-05, weight_decay=0.1, ...`: those of `names` the group holds, the settings
    users set first, at most MAX_SHOWN_SETTINGS."""
    order = sorted(names, key=lambda n: (n not in _FIRST_SETTINGS, _rank(n), n))
    said = [f"{name}={group.get(name, '-')}" for name in order[:MAX_SHOWN_SETTINGS]]
    more = len(order) - len(said)
    return ", ".join(said) + (f", +{more} more" if more > 0 else "")


def _rank(name: str) -> int:
    return _FIRST_SETTINGS.index(name) if name in _FIRST_SETTINGS else 0


def group_meta_entries(objects: Iterable[ObjectEntry]) -> dict[str, list[ObjectEntry]]:
    """The entries of `objects` under each group-settings root."""
    found: dict[str, list[ObjectEntry]] = {}
    for entry in objects:
        root = group_meta_root(entry.name)
        if root is not None:
            found.setdefault(root, []).append(entry)
    return found


__all__ = ["GROUP_META", "group_meta_entries", "group_meta_root", "summarise"]
