"""Streaming I/O: a tensor that keeps its name is copied file-to-file in the kernel, or cast
a bounded piece at a time through per-thread buffers; NaN/Inf are counted on the way.
"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol, cast

from mfsdp_ckpt.check.removed_while_read import shrank_while_read
from mfsdp_ckpt.convert.export_errors import NonFiniteError
from mfsdp_ckpt.convert.export_plan import ExportPlan
from mfsdp_ckpt.convert.fused_tensors import ROW_PREFIX_TRANSFORMS
from mfsdp_ckpt.convert.name_maps import MappedTensor
from mfsdp_ckpt.format.dtypes import DType
from mfsdp_ckpt.format.finite import count_nonfinite_in_file, count_nonfinite_tensor
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.safetensors_writer import ShardedSafetensorsWriter

if TYPE_CHECKING:
    import torch


class _FdStore(Protocol):
    """A byte store that hands out file descriptors (local disk), for copy_file_range."""

    def open_fd(self, name: str) -> int: ...


_NO_KERNEL_COPY = {errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF}


# A cast converts this many elements at a time (4 MiB of fp32 in, 2 MiB of bf16 out): small
# enough that the piece just read is still in cache when it is cast and the cast still in
# cache when it is written.
STREAM_PIECE_ELEMENTS = 1 << 20


def is_streamable(plan: ExportPlan, item: MappedTensor) -> bool:
    """Tensors that keep their name layout and sit in dim-0 slabs (how FSDP2 and Megatron-FSDP
    shard) map each chunk to one contiguous byte range of the output, so they can be
    streamed chunk by chunk: copied in the kernel when the dtype stays, cast a piece at a
    time when it changes. Neither holds the tensor in memory. A transform that keeps the
    first rows (Megatron's vocabulary padding dropped) streams the same way, only shorter."""
    entry = plan.entry(item)
    return (
        item.transform in ROW_PREFIX_TRANSFORMS
        and not plan.merges(item)  # a LoRA delta is added to it: read whole, merged, written
        and entry.numel > 0
        and hasattr(plan.source.reader.store, "open_fd")
        and not plan.source.reader.coverage_problems(entry)
        and all(
            c.numel == 0
            or (c.offsets[1:] == (0,) * (len(c.offsets) - 1) and c.sizes[1:] == entry.shape[1:])
            for c in entry.chunks
        )
    )


class PieceBuffers(threading.local):
    """Per-thread buffers a cast reads into and converts into, allocated once and reused
    (fresh allocations cost page faults that, on this kind of VM, cost more than the copy).
    `nonfinite` counts the NaN/Inf the last cast wrote; `overflow` says its source was
    finite, so the values were out of the export dtype's range."""

    nonfinite = 0
    overflow = False
    source: torch.Tensor | None = None
    target: torch.Tensor | None = None

    def get(self, source_bytes: int, target_bytes: int) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        if self.source is None or self.source.numel() < source_bytes:
            self.source = torch.empty(source_bytes, dtype=torch.uint8)
        if self.target is None or self.target.numel() < target_bytes:
            self.target = torch.empty(target_bytes, dtype=torch.uint8)
        return self.source, self.target


class RawPiece(NamedTuple):
    """One stored chunk of an `is_streamable` tensor as raw bytes: its `file`, where its bytes
    start there (`offset`), its element count as stored (`stored`), and the `numel` of
    them that land in the output from element `start` on (fewer: padding dropped)."""

    file: str
    offset: int
    stored: int
    start: int
    numel: int


def raw_pieces(plan: ExportPlan, item: MappedTensor) -> list[RawPiece] | None:
    """Where each stored chunk of an `is_streamable` tensor lands in its one output, in
    order; None when a blob is not plain raw bytes (the caller decodes it whole). Shared
    by the export's stream and --verify's, which reads the source as the export did."""
    reader, entry = plan.source.reader, plan.entry(item)
    row = entry.numel // entry.shape[0] if entry.shape else 1  # elements per dim-0 row
    kept_rows = item.shapes[0][0] if entry.shape else 1  # fewer than stored: padding dropped
    pieces: list[RawPiece] = []
    for chunk in (c for c in entry.chunks if c.numel):
        first_row = chunk.offsets[0] if entry.shape else 0
        if first_row >= kept_rows:
            continue
        offset = reader.raw_payload_offset(entry, chunk)
        if offset is None or chunk.file is None:
            return None
        kept = min(chunk.numel, (kept_rows - first_row) * row)
        pieces.append(RawPiece(chunk.file, offset, chunk.numel, first_row * row, kept))
    return pieces


def open_piece(plan: ExportPlan, item: MappedTensor, piece: RawPiece) -> int:
    """A descriptor of `piece`'s file (the caller closes it), checked to hold its bytes."""
    reader, size = plan.source.reader, plan.entry(item).dtype.itemsize
    fd = cast("_FdStore", reader.store).open_fd(piece.file)  # `is_streamable`: has open_fd
    try:
        _check_size(fd, piece.offset + piece.stored * size, reader.root / piece.file)
    except BaseException:
        os.close(fd)
        raise
    return fd


def stream_tensor(
    plan: ExportPlan, item: MappedTensor, writer: ShardedSafetensorsWriter, buffers: PieceBuffers
) -> bool:
    """Stream one `is_streamable` tensor into place; False (nothing claimed) when a blob is not
    plain raw bytes or the kernel/filesystem cannot copy, so the caller decodes instead."""
    reader, entry = plan.source.reader, plan.entry(item)
    pieces = raw_pieces(plan, item)
    if pieces is None:
        return False
    name, out_dtype = item.targets[0], plan.dtypes[item.targets[0]]
    try:
        for index, piece in enumerate(pieces):
            fd = open_piece(plan, item, piece)
            try:
                done = index == len(pieces) - 1
                if out_dtype == entry.dtype:
                    size = entry.dtype.itemsize
                    if not plan.allow_nonfinite:
                        _check_finite_range(plan, item, fd, piece.offset, piece.numel)
                    writer.copy_range(
                        name, fd, piece.offset, piece.start * size, piece.numel * size, done=done
                    )
                else:
                    _cast_range(
                        fd,
                        piece.offset,
                        entry.dtype,
                        piece.numel,
                        writer,
                        name,
                        piece.start,
                        out_dtype,
                        done,
                        buffers,
                        reader.root / piece.file,
                    )
                    if not plan.allow_nonfinite and buffers.nonfinite:
                        raise nonfinite_error(plan, item, buffers.nonfinite, buffers.overflow)
            finally:
                os.close(fd)
    except OSError as err:
        if err.errno in _NO_KERNEL_COPY:
            return False
        raise
    return True


def _check_finite_range(
    plan: ExportPlan, item: MappedTensor, fd: int, offset: int, numel: int
) -> None:
    """NonFiniteError when `numel` raw elements at `offset` of `fd` hold NaN/Inf (counted on
    bytes read, which the copy then finds in the page cache)."""
    found = count_nonfinite_in_file(fd, offset, numel, plan.entry(item).dtype)
    if found:
        raise nonfinite_error(plan, item, found, overflow=False)


def nonfinite_error(
    plan: ExportPlan, item: MappedTensor, count: int, overflow: bool | None
) -> NonFiniteError:
    """`overflow`: the source was finite (True), was not (False), or is not known (None)."""
    what = {
        True: f"overflows {plan.dtype.name} ({count} value(s) become Inf)",
        False: f"holds {count} NaN/Inf value(s) (a diverged run?)",
        None: f"has {count} NaN/Inf value(s) as {plan.dtype.name}",
    }[overflow]
    return NonFiniteError(
        f"{plan.source.location} [{item.source}]: {what}; --allow-nonfinite exports it anyway"
    )


def _check_size(fd: int, needed: int, path: Path) -> None:
    size = os.fstat(fd).st_size
    if size < needed:
        raise CheckpointFileError(
            f"{path}: needs {needed} bytes but the file has {size} (truncated?)"
        )


def _cast_range(
    fd: int,
    offset: int,
    dtype: DType,
    numel: int,
    writer: ShardedSafetensorsWriter,
    name: str,
    start: int,
    out_dtype: DType,
    done: bool,
    buffers: PieceBuffers,
    path: Path,
) -> None:
    """Read `numel` raw `dtype` elements at `offset` of `fd` and write them cast to `out_dtype`
    at element `start` of `name`, a bounded piece at a time (torch rounds as `.to()` does)."""
    import torch

    source, target = buffers.get(
        STREAM_PIECE_ELEMENTS * dtype.itemsize, STREAM_PIECE_ELEMENTS * out_dtype.itemsize
    )
    buffers.nonfinite, buffers.overflow = 0, True
    for first in range(0, numel, STREAM_PIECE_ELEMENTS):
        count = min(STREAM_PIECE_ELEMENTS, numel - first)
        raw = source[: count * dtype.itemsize]
        pread_exact(fd, raw.numpy().data, offset + first * dtype.itemsize, path)
        cast = target[: count * out_dtype.itemsize].view(out_dtype.torch)
        cast.copy_(raw.view(dtype.torch))
        finite = torch.isfinite(cast)  # one pass over bytes still in cache
        if not bool(finite.all()):
            buffers.nonfinite += int((~finite).sum())
            source_finite = not count_nonfinite_tensor(raw.view(dtype.torch))
            buffers.overflow = buffers.overflow and source_finite
        last = done and first + count == numel
        writer.write_range(
            name,
            cast.view(torch.uint8).numpy().data,
            (start + first) * out_dtype.itemsize,
            last,
        )


def pread_exact(fd: int, buffer: memoryview, offset: int, path: Path) -> None:
    done = 0
    while done < len(buffer):
        count = os.preadv(fd, [buffer[done:]], offset + done)
        if count <= 0:  # its size was checked before the read
            raise shrank_while_read(fd, offset + len(buffer), path)
        done += count
