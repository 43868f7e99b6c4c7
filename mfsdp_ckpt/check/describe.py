"""What `mfsdp ckpt inspect` shows: a checkpoint described as plain data, then as text."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from mfsdp_ckpt.check.printable import printable
from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.format.manifest import read_manifest
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.reader import CheckpointReader, ObjectEntry

# Non-tensor entries decoded to show their value: small ones only, a bounded number of them.
MAX_DECODED_OBJECT_BYTES = 64 << 10
MAX_DECODED_OBJECTS = 512
MAX_SHOWN_VALUE_CHARS = 60
MAX_NAME_CHARS = 200  # a tensor name column wider than this is a crafted name
_SCALARS = (bool, int, float, str)


def describe_object(reader: CheckpointReader, entry: ObjectEntry, decode: bool) -> dict:
    """Key, kind and byte size of a non-tensor entry; for a scalar also its value.

    Decoding goes only through the reader's restricted loader, which builds plain data and
    tensors and refuses anything else: an argparse.Namespace or numpy RNG state shows as
    "not decoded", and nothing stored in the checkpoint ever runs."""
    described = {
        "name": entry.name,
        "kind": "opaque",
        "bytes": entry.length,
        "value": None,
        "not_decoded": None,
    }
    if entry.file is None:
        described["not_decoded"] = "no storage entry"
        return described
    if not decode or entry.length > MAX_DECODED_OBJECT_BYTES:
        described["not_decoded"] = "too large or too many to decode"
        return described
    try:
        value = reader.read_object(entry.name)
    except (CheckpointFormatError, CheckpointFileError):
        described["not_decoded"] = "holds types the restricted reader refuses"
        return described
    described["kind"] = type(value).__name__
    if isinstance(value, _SCALARS):
        described["value"] = value if not isinstance(value, str) else value[:MAX_SHOWN_VALUE_CHARS]
    return described


def describe_checkpoint(path: str | os.PathLike, *, role: str | None = None) -> dict:
    paths = layout.resolve_checkpoint(path, role=role)
    reader = CheckpointReader(paths.dist_ckpt)
    manifest = (
        read_manifest(paths.manifest)
        if paths.manifest and os.path.lexists(paths.manifest)
        else None
    )
    tensors: list[dict[str, Any]] = [
        {
            "name": entry.name,
            "shape": list(entry.shape),
            "dtype": entry.dtype.name,
            "chunks": len(entry.chunks),
            "bytes": entry.nbytes,
        }
        for entry in reader.tensors.values()
    ]
    groups = Counter(entry["name"].split(".", 1)[0] for entry in tensors)
    objects = [
        describe_object(reader, entry, decode=index < MAX_DECODED_OBJECTS)
        for index, entry in enumerate(sorted(reader.objects.values(), key=lambda e: e.name))
    ]
    return {
        "checkpoint": str(paths.dist_ckpt),
        "step": paths.step,
        "layout": paths.kind,
        "role": paths.role,
        "roles": list(paths.roles),
        "note": paths.note,
        "contents": manifest.contents if manifest else sorted(groups),
        "world_size": manifest.world_size if manifest else None,
        "strategy": manifest.strategy if manifest else None,
        "model_family": manifest.model_family if manifest else None,
        "created_at": manifest.created_at if manifest else None,
        "tensors": tensors,
        "objects": objects,
        "totals": {
            "tensors": len(tensors),
            "bytes": sum(t["bytes"] for t in tensors),
            "by_group": {group: count for group, count in sorted(groups.items())},
            "files": len(reader.files()),
        },
    }


def format_description(description: dict) -> str:
    """The description as terminal text: names escaped and cut (mfsdp_ckpt.check.printable), so a
    crafted name can neither drive the terminal nor widen every line of the table."""
    lines = [
        f"checkpoint  {printable(description['checkpoint'])}",
        f"step        {description['step'] if description['step'] is not None else '-'}",
        f"contents    {printable(', '.join(description['contents']))}",
    ]
    lines.append(
        f"layout      {description['layout']}"
        + (
            f" ({description['role']}; roles: {', '.join(description['roles'])})"
            if description["role"]
            else ""
        )
    )
    for key in ("world_size", "strategy", "model_family", "created_at"):
        if description[key] is not None:
            lines.append(f"{key:<11} {printable(description[key])}")
    names = [printable(t["name"], MAX_NAME_CHARS) for t in description["tensors"]]
    width = max((len(name) for name in names), default=4)
    lines.append("")
    lines.append(f"{'name':<{width}}  {'shape':<16} {'dtype':<9} {'chunks':>6} {'MiB':>9}")
    for name, tensor in zip(names, description["tensors"]):
        shape = "x".join(map(str, tensor["shape"])) or "scalar"
        lines.append(
            f"{name:<{width}}  {shape:<16} {tensor['dtype']:<9} {tensor['chunks']:>6} "
            f"{tensor['bytes'] / 2**20:>9.2f}"
        )
    if description["objects"]:
        object_names = [printable(o["name"], MAX_NAME_CHARS) for o in description["objects"]]
        width = max(len(name) for name in object_names)
        lines.append("")
        lines.append(f"{'non-tensor entry':<{width}}  {'kind':<8} {'bytes':>9}  value")
        for name, entry in zip(object_names, description["objects"]):
            value = printable(repr(entry["value"])) if entry["value"] is not None else ""
            value = f"(not decoded: {entry['not_decoded']})" if entry["not_decoded"] else value
            row = f"{name:<{width}}  {entry['kind']:<8} {entry['bytes']:>9}  {value}"
            lines.append(row.rstrip())
    totals = description["totals"]
    groups = printable(
        ", ".join(f"{printable(g, MAX_NAME_CHARS)} {n}" for g, n in totals["by_group"].items())
    )
    lines.append("")
    lines.append(
        f"total       {totals['tensors']} tensors ({groups}), {totals['bytes'] / 2**20:.2f} MiB "
        f"in {totals['files']} data files, {len(description['objects'])} non-tensor entries"
    )
    return "\n".join(lines)
