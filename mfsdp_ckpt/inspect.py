"""What `mfsdp ckpt inspect` shows: a checkpoint described as plain data, then as text."""

from __future__ import annotations

import os
from collections import Counter

from mfsdp_ckpt import layout
from mfsdp_ckpt.manifest import read_manifest
from mfsdp_ckpt.printable import printable
from mfsdp_ckpt.reader import CheckpointReader


MAX_NAME_CHARS = 200  # a tensor name column wider than this is a crafted name


def describe_checkpoint(path: str | os.PathLike) -> dict:
    paths = layout.resolve_checkpoint(path)
    reader = CheckpointReader(paths.dist_ckpt)
    manifest = read_manifest(paths.manifest) if paths.manifest and paths.manifest.is_file() else None
    tensors = [
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
    return {
        "checkpoint": str(paths.dist_ckpt),
        "step": paths.step,
        "contents": manifest.contents if manifest else sorted(groups),
        "world_size": manifest.world_size if manifest else None,
        "strategy": manifest.strategy if manifest else None,
        "model_family": manifest.model_family if manifest else None,
        "created_at": manifest.created_at if manifest else None,
        "tensors": tensors,
        "objects": sorted(reader.objects),
        "totals": {
            "tensors": len(tensors),
            "bytes": sum(t["bytes"] for t in tensors),
            "by_group": {group: count for group, count in sorted(groups.items())},
            "files": len(reader.files()),
        },
    }


def format_description(description: dict) -> str:
    """The description as terminal text: names escaped and cut (mfsdp_ckpt.printable), so a
    crafted name can neither drive the terminal nor widen every line of the table."""
    lines = [
        f"checkpoint  {printable(description['checkpoint'])}",
        f"step        {description['step'] if description['step'] is not None else '-'}",
        f"contents    {printable(', '.join(description['contents']))}",
    ]
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
    totals = description["totals"]
    groups = printable(", ".join(f"{printable(g, MAX_NAME_CHARS)} {n}" for g, n in totals["by_group"].items()))
    lines.append("")
    lines.append(
        f"total       {totals['tensors']} tensors ({groups}), {totals['bytes'] / 2**20:.2f} MiB "
        f"in {totals['files']} data files, {len(description['objects'])} non-tensor entries"
    )
    return "\n".join(lines)
