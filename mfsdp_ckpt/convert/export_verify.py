"""--verify: re-read the written safetensors and compare every tensor, bit for bit, with its
source after conversion and cast: per thread, the converted tensor and one piece of the
written one (`differing_bytes`) in memory at a time.
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from mfsdp_ckpt.convert.export_listing import list_export, named_in_export
from mfsdp_ckpt.convert.export_plan import ExportPlan, convert
from mfsdp_ckpt.convert.export_scheduler import MIN_BUFFER_BYTES, Progress, run_tasks
from mfsdp_ckpt.convert.name_maps import MappedTensor
from mfsdp_ckpt.storage.safetensors_source import SafetensorsSource, StoredTensor

if TYPE_CHECKING:
    import torch

# The bytes of a written tensor read at a time to compare (one buffer per thread)
COMPARE_PIECE_BYTES = 64 << 20


class _Tally:
    """Tensors and bytes compared so far, over every file, reported to `progress` as the
    export's own bar is fed (tensors done/total, bytes done/total): verifying reads and
    converts the checkpoint again, as long as the export took, and showed nothing."""

    def __init__(self, plan: ExportPlan, progress: Progress):
        specs = plan.specs()
        self.progress, self.tensors, self.bytes = progress, 0, 0
        self.total_tensors = len(specs)
        self.total_bytes = sum(math.prod(shape) * dtype.itemsize for _, dtype, shape in specs)
        self.lock = threading.Lock()

    def add(self, tensors: int, nbytes: int) -> None:
        with self.lock:
            self.tensors += tensors
            self.bytes += nbytes
            self.progress(self.tensors, self.total_tensors, self.bytes, self.total_bytes)


def verify_export(
    plan: ExportPlan,
    out_dir: str | os.PathLike,
    *,
    workers: int = 4,
    buffer_bytes: int = MIN_BUFFER_BYTES,
    progress: Progress | None = None,
) -> list[str]:
    """Re-open the written safetensors and compare every tensor, bit for bit, with its
    source after conversion and cast. Returns one line per problem (empty: all equal):
    first what a loader would meet before any tensor (`export_listing`: the index, files
    that cannot be read, tensors not where the index says, missing or not the checkpoint's),
    then the tensors that differ. `progress` gets (tensors compared, tensors, bytes
    compared, bytes) as each is done.

    Each file's header is read once and its tensors compared by it (`_verify_file`), one
    file at a time: parsing a file's whole header per tensor costs time quadratic in its
    tensor count (minutes for tens of thousands)."""
    out = Path(out_dir)
    listing = list_export(out, {name for item in plan.items for name in item.targets})
    found: list[str] = []
    tally = _Tally(plan, progress) if progress is not None else None
    for file, compared in listing.read_from().items():
        written_file = listing.readable[file]
        found += _verify_file(plan, file, written_file, compared, workers, buffer_bytes, tally)
    return listing.problems + found


def _verify_file(
    plan: ExportPlan,
    file: str,
    written_file: SafetensorsSource,
    listed: set[str],
    workers: int,
    buffer_bytes: int,
    tally: _Tally | None = None,
) -> list[str]:
    """Compare the tensors `listed` (those a loader reads from `file`, which its header,
    read once, holds) with the items that make them; an item whose targets lie in several
    files is converted once per file. Each item's compared tensors are added to `tally`.

    Each written tensor is read a piece at a time into memory of its own
    (`differing_bytes`), never through `safe_open`, which maps the whole file: the mapped
    pages count in the process's memory, so verifying a 5 GB shard held 5 GB, whatever its
    largest tensor."""
    problems: list[str] = []
    lock = threading.Lock()

    def work(item: MappedTensor) -> int:
        found = []
        compared, compared_bytes = 0, 0
        for name, wanted in convert(plan, item):
            if name not in listed:
                continue
            compared, compared_bytes = compared + 1, compared_bytes + wanted.nbytes
            entry = written_file.tensors[name]
            if entry.dtype.torch != wanted.dtype or entry.shape != tuple(wanted.shape):
                found.append(
                    f"{name}: {entry.shape} {entry.dtype.torch} written, "
                    f"{tuple(wanted.shape)} {wanted.dtype} expected"
                )
                continue
            try:
                differing = differing_bytes(written_file, entry, wanted)
            except OSError as err:
                found.append(
                    f"{name}: unreadable in {file} ({named_in_export(str(err), written_file.root)})"
                )
                continue
            if differing:
                found.append(f"{name}: {differing} byte(s) differ from {item.source} in {file}")
        with lock:
            problems.extend(found)
        if tally is not None:
            tally.add(compared, compared_bytes)
        return compared_bytes

    here = [item for item in plan.items if not listed.isdisjoint(item.targets)]
    run_tasks(replace(plan, items=here), work, workers, buffer_bytes, None, 0)
    return problems


def differing_bytes(
    written_file: SafetensorsSource,
    entry: StoredTensor,
    wanted: torch.Tensor,
    piece_bytes: int = COMPARE_PIECE_BYTES,
) -> int:
    """How many of the written `entry`'s bytes differ from `wanted`'s, read `piece_bytes`
    at a time into one buffer: the written tensor read whole beside the converted source
    held both, 2x the largest tensor (2.4x with torch), where the help promises about the
    largest tensor plus a fixed buffer."""
    import torch

    expected = bit_pattern(wanted)
    piece = torch.empty(min(piece_bytes, entry.nbytes), dtype=torch.uint8)
    differing = 0
    for start in range(0, entry.nbytes, piece_bytes):
        part = piece[: min(piece_bytes, entry.nbytes - start)]
        written_file.read_into(entry, part.numpy().data, start)
        wanted_part = expected[start : start + len(part)]
        if not torch.equal(part, wanted_part):  # counted only then: the mask is a copy
            differing += int(torch.count_nonzero(part != wanted_part))
    return differing


def bit_pattern(tensor: torch.Tensor) -> torch.Tensor:
    import torch

    return tensor.contiguous().reshape(-1).view(torch.uint8)
