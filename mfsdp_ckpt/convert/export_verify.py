"""--verify: re-read the written safetensors and compare every tensor, bit for bit, with its
source after conversion and cast. A tensor the export streams (`streams_in_pieces`: from local
files or a URL) is compared as it was written, a piece of the source read and cast beside the
same piece of the written file (`_streamed_pieces`), so verifying it holds no more than the
export did; any other is converted whole and its written bytes read a piece at a time
(`differing_bytes`). Without a manifest, every source record read, streamed or converted
whole, is checked against the CRC torch.save wrote for it (`_checks_crcs`).
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from mfsdp_ckpt.check.tensor_crc import CrcCheckedReader, PayloadCrc
from mfsdp_ckpt.convert.export_listing import list_export, named_in_export
from mfsdp_ckpt.convert.export_plan import ExportPlan, convert, task_cost
from mfsdp_ckpt.convert.export_scheduler import MIN_BUFFER_BYTES, Progress, run_tasks
from mfsdp_ckpt.convert.export_source import ExportSource
from mfsdp_ckpt.convert.export_stream import (
    PieceBuffers,
    RawPiece,
    raw_pieces,
    streams_in_pieces,
)
from mfsdp_ckpt.convert.name_maps import MappedTensor
from mfsdp_ckpt.errors import MfsdpFailedError
from mfsdp_ckpt.storage.piece_reads import piece_reader, window_elements
from mfsdp_ckpt.storage.reader import RawPayload
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
    plan = replace(plan, source=checking_crcs(plan.source))
    listing = list_export(out, {name for item in plan.items for name in item.targets})
    found: list[str] = []
    tally = _Tally(plan, progress) if progress is not None else None
    for file, compared in listing.read_from().items():
        written_file = listing.readable[file]
        found += _verify_file(plan, file, written_file, compared, workers, buffer_bytes, tally)
    return listing.problems + found


def _checks_crcs(source: ExportSource) -> bool:
    """Whether the source's bytes are checked against the CRCs torch.save wrote for them:
    without a manifest (whose digests --verify checks, vouching for every byte) they are
    the only evidence that the source is what was saved, and the export read it unchecked."""
    return source.paths is None or source.paths.manifest is None


def checking_crcs(source: ExportSource) -> ExportSource:
    """`source` read through a `CrcCheckedReader` where `_checks_crcs`, for a --verify that
    decodes tensors through its reader (a fused QKV or gate/up split, stacked experts, a
    LoRA adapter or merge): torch decodes a record checking no CRC."""
    if not _checks_crcs(source):
        return source
    return replace(source, reader=CrcCheckedReader.over(source.reader))


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
    (`_differing`), never through `safe_open`, which maps the whole file: the mapped
    pages count in the process's memory, so verifying a 5 GB shard held 5 GB, whatever its
    largest tensor. A streamed tensor's source is read a piece at a time too (costing the
    byte budget nothing, as in the export): converted whole, a bf16 export's largest
    tensor was held in fp32 and in bf16 at once, 1.6x it in all."""
    problems: list[str] = []
    lock = threading.Lock()
    here = replace(plan, items=[i for i in plan.items if not listed.isdisjoint(i.targets)])
    streamable = {item.source for item in here.items if streams_in_pieces(here, item)}
    buffers = _CompareBuffers()

    def work(item: MappedTensor) -> None:
        found = []
        compared, compared_bytes = 0, 0
        for name, shape, dtype, pieces in _expected(here, item, streamable, buffers):
            if name not in listed:
                continue
            nbytes = math.prod(shape) * dtype.itemsize
            compared, compared_bytes = compared + 1, compared_bytes + nbytes
            entry = written_file.tensors[name]
            if entry.dtype.torch != dtype or entry.shape != shape:
                found.append(
                    f"{name}: {entry.shape} {entry.dtype.torch} written, {shape} {dtype} expected"
                )
                continue
            try:
                differing = _differing(written_file, entry, pieces, buffers)
            except _WrittenUnreadable as err:
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

    def cost(plan: ExportPlan, item: MappedTensor) -> int:
        return 0 if item.source in streamable else task_cost(plan, item)

    run_tasks(here, work, workers, buffer_bytes, None, cost)
    return problems


class _WrittenUnreadable(MfsdpFailedError):
    """`error` came reading the written file, not the source (whose errors propagate);
    caught where the comparison is made and said as that tensor's problem (exit 1, were it
    to reach the command)."""

    def __init__(self, error: OSError):
        super().__init__(str(error))
        self.error = error


class _CompareBuffers(PieceBuffers):
    """`PieceBuffers` (source piece, its cast) plus one for the written piece beside them."""

    written: torch.Tensor | None = None

    def written_piece(self, nbytes: int) -> torch.Tensor:
        import torch

        if self.written is None or self.written.numel() < nbytes:
            self.written = torch.empty(nbytes, dtype=torch.uint8)
        return self.written[:nbytes]


# (HF name, shape, dtype, (byte offset in the written tensor, expected bytes) in order)
_Expected = tuple[str, tuple[int, ...], "torch.dtype", Iterable[tuple[int, "torch.Tensor"]]]


def _expected(
    plan: ExportPlan, item: MappedTensor, streamable: set[str], buffers: _CompareBuffers
) -> Iterator[_Expected]:
    """What `item` should have written: streamed when the export streamed it and its source
    is raw bytes (`_streamed_pieces`), else converted whole and cut into pieces."""
    pieces = raw_pieces(plan, item) if item.source in streamable else None
    if pieces is not None:
        name = item.targets[0]
        yield (
            name,
            tuple(item.shapes[0]),
            plan.dtypes[name].torch,
            _streamed_pieces(plan, item, pieces, buffers),
        )
        return
    for name, wanted in convert(plan, item):
        yield name, tuple(wanted.shape), wanted.dtype, _whole_pieces(wanted)


def _streamed_pieces(
    plan: ExportPlan, item: MappedTensor, pieces: list[RawPiece], buffers: _CompareBuffers
) -> Iterator[tuple[int, torch.Tensor]]:
    """The expected bytes of a streamed tensor, a bounded piece at a time: read from the
    source as stored, as the export read it (`STREAM_PIECE_ELEMENTS` through a descriptor,
    a store's read size from a URL), and cast as the export cast them (torch rounds as
    `.to()` does). The tensor is never held whole, whatever the store. Where
    `_checks_crcs`, each stored chunk's bytes are checked against the CRC written for them
    (`PayloadCrc`), the rows the export drops (vocabulary padding) read too for it."""
    source_dtype, out_dtype = plan.entry(item).dtype, plan.dtypes[item.targets[0]]
    reader, size = plan.source.reader, source_dtype.itemsize
    elements = window_elements(reader, size, max(piece.numel for piece in pieces))
    source, target = buffers.get(elements * size, elements * out_dtype.itemsize)
    crcs = _checks_crcs(plan.source)
    for piece in pieces:
        where = f"{reader.root / piece.file} [{plan.entry(item).name}]"
        written = piece.crc if crcs else None
        crc = PayloadCrc(RawPayload(piece.offset, written, piece.record), where)
        read = piece.numel if written is None else piece.stored
        with piece_reader(reader, piece.file, piece.offset + piece.stored * size) as fill:
            for first in range(0, read, elements):
                count = min(elements, read - first)
                raw = source[: count * size]
                fill(buffer=raw.numpy().data, offset=piece.offset + first * size)
                crc.add(raw.numpy().data)
                kept = min(count, piece.numel - first)
                if kept <= 0:
                    continue
                raw = raw[: kept * size]
                expected = raw
                if out_dtype != source_dtype:
                    expected = target[: kept * out_dtype.itemsize]
                    expected.view(out_dtype.torch).copy_(raw.view(source_dtype.torch))
                yield (piece.start + first) * out_dtype.itemsize, expected
        crc.check()


def _whole_pieces(
    wanted: torch.Tensor, piece_bytes: int = COMPARE_PIECE_BYTES
) -> Iterator[tuple[int, torch.Tensor]]:
    expected = bit_pattern(wanted)
    for start in range(0, len(expected), piece_bytes):
        yield start, expected[start : start + piece_bytes]


def _differing(
    written_file: SafetensorsSource,
    entry: StoredTensor,
    pieces: Iterable[tuple[int, torch.Tensor]],
    buffers: _CompareBuffers,
) -> int:
    """How many of the written `entry`'s bytes differ from the expected `pieces`, each read
    beside its piece into one buffer; `_WrittenUnreadable` when the written file fails."""
    import torch

    differing = 0
    for start, wanted_part in pieces:
        part = buffers.written_piece(len(wanted_part))
        try:
            written_file.read_into(entry, part.numpy().data, start)
        except OSError as err:
            raise _WrittenUnreadable(err) from err
        if not torch.equal(part, wanted_part):  # counted only then: the mask is a copy
            differing += int(torch.count_nonzero(part != wanted_part))
    return differing


def differing_bytes(
    written_file: SafetensorsSource,
    entry: StoredTensor,
    wanted: torch.Tensor,
    piece_bytes: int = COMPARE_PIECE_BYTES,
) -> int:
    """How many of the written `entry`'s bytes differ from `wanted`'s, read `piece_bytes`
    at a time into one buffer: the written tensor read whole beside the converted source
    held both, 2x the largest tensor (2.4x with torch), where the help promises about the
    largest tensor plus a fixed buffer. An OSError reading the written file propagates."""
    try:
        return _differing(
            written_file, entry, _whole_pieces(wanted, piece_bytes), _CompareBuffers()
        )
    except _WrittenUnreadable as err:
        raise err.error from None


def bit_pattern(tensor: torch.Tensor) -> torch.Tensor:
    import torch

    return tensor.contiguous().reshape(-1).view(torch.uint8)
