"""--verify: re-read the written safetensors and compare every tensor, bit for bit, with its
source after conversion and cast, one tensor's bytes in memory at a time (per thread).
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from mfsdp_ckpt.convert.export_plan import ExportPlan, convert, natural_key
from mfsdp_ckpt.convert.export_scheduler import MIN_BUFFER_BYTES, Progress, run_tasks
from mfsdp_ckpt.convert.name_maps import MappedTensor
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.safetensors_source import (
    SafetensorsError,
    SafetensorsSource,
    index_weight_map,
)

if TYPE_CHECKING:
    import torch


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
    source after conversion and cast. Returns one line per problem (empty: all equal).
    `progress` gets (tensors compared, tensors, bytes compared, bytes) as each is done.

    Each file's header is read once and its tensors compared by it (`_verify_file`), one
    file at a time: parsing a file's whole header per tensor costs time quadratic in its
    tensor count (minutes for tens of thousands)."""
    out = Path(out_dir)
    index = index_weight_map(out)  # bounded, as any model dir's index is read
    files = sorted(set(index.values())) if index is not None else _single_files(out)
    where: dict[str, str] = dict(index) if index is not None else {}
    found: list[str] = []
    tally = _Tally(plan, progress) if progress is not None else None
    for file in files:
        found += _verify_file(plan, out, file, index, where, workers, buffer_bytes, tally)
    expected = {name for item in plan.items for name in item.targets}
    problems = [
        f"{name}: missing from the export"
        for name in sorted(expected - set(where), key=natural_key)
    ]
    problems += [
        f"{name}: in {where[name]} but not in the checkpoint"
        for name in sorted(set(where) - expected)
    ]
    return problems + found


def _inside_export(err: Exception, out: Path) -> str:
    """`err`'s text with the export's own dir left out of the paths it names: `out` is the
    hidden work dir of an export not yet published, gone (removed, as the export failed) by
    the time the line is read; the file's name within the export is what the user can find."""
    return str(err).replace(f"{out}{os.sep}", "").replace(str(out), "the export")


def _verify_file(
    plan: ExportPlan,
    out: Path,
    file: str,
    index: dict[str, str] | None,
    where: dict[str, str],
    workers: int,
    buffer_bytes: int,
    tally: _Tally | None = None,
) -> list[str]:
    """Compare the tensors `file` holds (by the index, else by its header, which adds them
    to `where`) with the items that make them, its header read once for all of them; an
    item whose targets lie in several files is converted once per file. Each item's
    compared tensors are added to `tally`.

    Each written tensor is read into memory of its own (`SafetensorsSource`, as import
    reads), never through `safe_open`, which maps the whole file: the mapped pages count
    in the process's memory, so verifying a 5 GB shard held 5 GB, whatever its largest
    tensor."""
    import torch

    listed = {name for name, held in index.items() if held == file} if index is not None else set()
    try:  # a file linked out of the export is not the export's: never opened
        safe_files.regular_file(out / file, out, f"the export {out}")
        written_file = SafetensorsSource(out, only=file)
    except (SafetensorsError, OSError) as err:
        reason = _inside_export(err, out)
        unreadable = [f"{name}: unreadable in {file} ({reason})" for name in sorted(listed)]
        return unreadable or [f"{file}: unreadable ({reason})"]
    problems: list[str] = []
    lock = threading.Lock()
    if index is None:
        listed = set(written_file.tensors)
        where.update(dict.fromkeys(listed, file))

    def work(item: MappedTensor) -> int:
        found = []
        compared, compared_bytes = 0, 0
        for name, wanted in convert(plan, item):
            if name not in listed:
                continue
            compared, compared_bytes = compared + 1, compared_bytes + wanted.nbytes
            if name not in written_file.tensors:
                found.append(f"{name}: not in {file}, where the index lists it")
                continue
            try:
                written = written_file.read(name)
            except OSError as err:
                found.append(f"{name}: unreadable in {file} ({_inside_export(err, out)})")
                continue
            if written.dtype != wanted.dtype or written.shape != wanted.shape:
                found.append(
                    f"{name}: {tuple(written.shape)} {written.dtype} written, "
                    f"{tuple(wanted.shape)} {wanted.dtype} expected"
                )
            elif not torch.equal(bit_pattern(written), bit_pattern(wanted)):
                differing = int((bit_pattern(written) != bit_pattern(wanted)).sum())
                found.append(f"{name}: {differing} byte(s) differ from {item.source} in {file}")
        with lock:
            problems.extend(found)
        if tally is not None:
            tally.add(compared, compared_bytes)
        return compared_bytes

    here = [item for item in plan.items if not listed.isdisjoint(item.targets)]
    run_tasks(replace(plan, items=here), work, workers, buffer_bytes, None, 0)
    return problems


def bit_pattern(tensor: torch.Tensor) -> torch.Tensor:
    import torch

    return tensor.contiguous().reshape(-1).view(torch.uint8)


def _single_files(out: Path) -> list[str]:
    """The safetensors files of an export without an index (one, as the writer makes it)."""
    return sorted(path.name for path in out.glob("*.safetensors"))
