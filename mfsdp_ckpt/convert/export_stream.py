"""Streaming I/O: a tensor that keeps its name is copied file-to-file in the kernel, or cast
a bounded piece at a time through per-thread buffers; NaN/Inf are counted on the way. From a
store with no file descriptors (a URL, through tensorstore) it is read a bounded piece at a
time into the same buffers, copied or cast there and written, so its memory is the
buffers' whatever the tensor's size. Each stored record's bytes are added to the CRC
torch.save wrote for it as they pass through memory (`piece_crc`), and a record whose bytes
fail it stops the export: torch.load checks none, and without a manifest that CRC is the
only evidence the bytes are the ones saved.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, NamedTuple

from mfsdp_ckpt.check.tensor_crc import PayloadCrc
from mfsdp_ckpt.convert.export_errors import NonFiniteError
from mfsdp_ckpt.convert.export_plan import ExportPlan
from mfsdp_ckpt.convert.fused_tensors import ROW_PREFIX_TRANSFORMS
from mfsdp_ckpt.convert.name_maps import MappedTensor
from mfsdp_ckpt.format.finite import count_nonfinite, count_nonfinite_tensor, is_checked
from mfsdp_ckpt.storage import tensorstore_store
from mfsdp_ckpt.storage.byte_store import read_into
from mfsdp_ckpt.storage.piece_reads import STREAM_PIECE_ELEMENTS, open_checked, pread_exact
from mfsdp_ckpt.storage.reader import RawPayload
from mfsdp_ckpt.storage.safetensors_writer import ShardedSafetensorsWriter

if TYPE_CHECKING:
    import torch

    from mfsdp_ckpt.convert.export_scheduler import StopFlag


_NO_KERNEL_COPY = {errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF}


def streams_in_pieces(plan: ExportPlan, item: MappedTensor) -> bool:
    """Tensors that keep their name layout and sit in dim-0 slabs (how FSDP2 and Megatron-FSDP
    shard) map each chunk to one contiguous byte range of the output, so they can be
    streamed chunk by chunk from any store, never held in memory whole. A transform that
    keeps the first rows (Megatron's vocabulary padding dropped) streams the same way,
    only shorter."""
    entry = plan.entry(item)
    return (
        item.transform in ROW_PREFIX_TRANSFORMS
        and not plan.merges(item)  # a LoRA delta is added to it: read whole, merged, written
        and entry.numel > 0
        and not plan.source.reader.coverage_problems(entry)
        and all(
            c.numel == 0
            or (c.offsets[1:] == (0,) * (len(c.offsets) - 1) and c.sizes[1:] == entry.shape[1:])
            for c in entry.chunks
        )
    )


def is_streamable(plan: ExportPlan, item: MappedTensor) -> bool:
    """`streams_in_pieces` from local files, whose descriptors let a tensor be copied in the
    kernel when the dtype stays and cast through pread pieces when it changes (what
    --verify reads back the same way, and what needs no torch when copied as stored)."""
    return streams_in_pieces(plan, item) and hasattr(plan.source.reader.store, "open_fd")


class PieceBuffers(threading.local):
    """Per-thread buffers a cast reads into and converts into, allocated once and reused
    (fresh allocations cost page faults that, on this kind of VM, cost more than the copy).
    `nonfinite` counts the NaN/Inf the last cast wrote; `overflow` says its source was
    finite, so the values were out of the export dtype's range."""

    nonfinite = 0
    overflow = False
    source: torch.Tensor | None = None
    target: torch.Tensor | None = None
    scanned: memoryview | None = None

    def get(self, source_bytes: int, target_bytes: int) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        if self.source is None or self.source.numel() < source_bytes:
            self.source = torch.empty(source_bytes, dtype=torch.uint8)
        if self.target is None or self.target.numel() < target_bytes:
            self.target = torch.empty(target_bytes, dtype=torch.uint8)
        return self.source, self.target

    def scan(self, nbytes: int) -> memoryview:
        """The buffer bytes copied as stored are read into before the kernel copies them: a
        bytearray, since such a copy needs no torch."""
        if self.scanned is None or len(self.scanned) < nbytes:
            self.scanned = memoryview(bytearray(nbytes))  # replaced, never resized
        return self.scanned[:nbytes]


class RawPiece(NamedTuple):
    """One stored chunk of an `is_streamable` tensor as raw bytes: its `file`, where its bytes
    start there (`offset`), its element count as stored (`stored`), and the `numel` of
    them that land in the output from element `start` on (fewer: padding dropped); with
    the CRC written for the stored bytes (None: none) and the record holding them, which
    the export checks as it reads them (`piece_crc`), and --verify as it rereads them."""

    file: str
    offset: int
    stored: int
    start: int
    numel: int
    crc: int | None = None
    record: str = ""


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
        payload = reader.raw_payload(entry, chunk)
        if payload is None or chunk.file is None:
            return None
        kept = min(chunk.numel, (kept_rows - first_row) * row)
        start = first_row * row
        pieces.append(RawPiece(chunk.file, payload.offset, chunk.numel, start, kept, *payload[1:]))
    return pieces


def piece_crc(plan: ExportPlan, item: MappedTensor, piece: RawPiece) -> PayloadCrc:
    """The CRC of `piece`'s stored bytes, to add them to as they are read, checked once all
    are in; naming the file and the tensor's key as --verify and validate --deep do."""
    where = f"{plan.source.reader.root / piece.file} [{plan.entry(item).name}]"
    return PayloadCrc(RawPayload(piece.offset, piece.crc, piece.record), where)


def read_elements(piece: RawPiece) -> int:
    """The elements of `piece` read: all it stores where a CRC was written for them (the
    rows dropped, vocabulary padding, are read for the CRC alone), else those written."""
    return piece.numel if piece.crc is None else piece.stored


def open_piece(plan: ExportPlan, item: MappedTensor, piece: RawPiece) -> int:
    """A descriptor of `piece`'s file (the caller closes it), checked to hold its bytes."""
    size = plan.entry(item).dtype.itemsize  # `is_streamable`: its store has open_fd
    return open_checked(plan.source.reader, piece.file, piece.offset + piece.stored * size)


def stream_tensor(
    plan: ExportPlan,
    item: MappedTensor,
    writer: ShardedSafetensorsWriter,
    buffers: PieceBuffers,
    stop: StopFlag,
) -> bool:
    """Stream one `streams_in_pieces` tensor into place; False (nothing claimed) when a blob is
    not plain raw bytes or the kernel/filesystem cannot copy, so the caller decodes instead.
    TaskStopped between two windows once `stop` is set (the writer's windows check it too)."""
    reader, entry = plan.source.reader, plan.entry(item)
    pieces = raw_pieces(plan, item)
    if pieces is None:
        return False
    if not hasattr(reader.store, "open_fd"):
        _stream_from_store(plan, item, pieces, writer, buffers)
        return True
    name, out_dtype = item.targets[0], plan.dtypes[item.targets[0]]
    try:
        for index, piece in enumerate(pieces):
            fd = open_piece(plan, item, piece)
            try:
                done = index == len(pieces) - 1
                if out_dtype == entry.dtype:
                    size = entry.dtype.itemsize
                    _scan_range(plan, item, fd, piece, buffers, stop)
                    writer.copy_range(
                        name, fd, piece.offset, piece.start * size, piece.numel * size, done=done
                    )
                else:
                    _cast_range(
                        partial(pread_exact, fd, path=reader.root / piece.file),
                        STREAM_PIECE_ELEMENTS,
                        plan,
                        item,
                        piece,
                        writer,
                        done,
                        buffers,
                    )
            finally:
                os.close(fd)
    except OSError as err:
        if err.errno in _NO_KERNEL_COPY:
            return False
        raise
    return True


def _stream_from_store(
    plan: ExportPlan,
    item: MappedTensor,
    pieces: list[RawPiece],
    writer: ShardedSafetensorsWriter,
    buffers: PieceBuffers,
) -> None:
    """Stream a tensor from a store with no descriptors (tensorstore: a URL): each piece is
    read straight into the thread's buffer, a store's read size at a time, then copied or
    cast and written; the tensor is never held whole. The store says a short read as the
    file and byte range it lacks."""
    store, entry = plan.source.reader.store, plan.entry(item)
    # no larger than the tensor's largest piece: a thread exporting small tensors keeps
    # small buffers
    read_size = max(1, tensorstore_store.READ_PIECE_BYTES // entry.dtype.itemsize)
    elements = min(read_size, max(read_elements(piece) for piece in pieces))
    for index, piece in enumerate(pieces):
        _cast_range(
            partial(read_into, store, piece.file),
            elements,
            plan,
            item,
            piece,
            writer,
            index == len(pieces) - 1,
            buffers,
        )


def _scan_range(
    plan: ExportPlan,
    item: MappedTensor,
    fd: int,
    piece: RawPiece,
    buffers: PieceBuffers,
    stop: StopFlag,
) -> None:
    """Read `piece`'s raw bytes in `fd` once, STREAM_PIECE_ELEMENTS at a time, before the
    kernel copies them (then from the page cache), checking `stop` between pieces (a
    tensor of many GiB takes seconds): each is added to its record's CRC where one was
    written, and its NaN/Inf counted unless allowed. A CRC failure, then NonFiniteError.
    Nothing is read when neither is asked for (--allow-nonfinite, a CRC written as 0)."""
    dtype, crc = plan.entry(item).dtype, piece_crc(plan, item, piece)
    counted = not plan.allow_nonfinite and is_checked(dtype)
    if not counted and piece.crc is None:
        return
    size, read, found = dtype.itemsize, read_elements(piece), 0
    path = plan.source.reader.root / piece.file
    for first in range(0, read, STREAM_PIECE_ELEMENTS):
        stop.check()
        count = min(STREAM_PIECE_ELEMENTS, read - first)
        raw = buffers.scan(count * size)
        pread_exact(fd, raw, piece.offset + first * size, path=path)
        crc.add(raw)
        kept = min(count, piece.numel - first)
        if counted and kept > 0:
            found += count_nonfinite(raw[: kept * size], dtype)
    crc.check()
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


def _cast_range(
    fill: Callable[..., None],
    piece_elements: int,
    plan: ExportPlan,
    item: MappedTensor,
    piece: RawPiece,
    writer: ShardedSafetensorsWriter,
    done: bool,
    buffers: PieceBuffers,
) -> None:
    """Read `piece`'s raw elements, `piece_elements` at a time, with
    `fill(buffer=..., offset=...)` (the offset in its file), add them to its record's CRC
    and write them cast to the output dtype in place (torch rounds as `.to()` does; the
    same dtype is written as read). A CRC failure, then NonFiniteError on NaN/Inf unless
    allowed, once all are read: the work dir holding what was written is dropped."""
    import torch

    dtype, name, crc = plan.entry(item).dtype, item.targets[0], piece_crc(plan, item, piece)
    out_dtype, offset, numel, start = plan.dtypes[name], piece.offset, piece.numel, piece.start
    cast_bytes = 0 if out_dtype == dtype else piece_elements * out_dtype.itemsize
    source, target = buffers.get(piece_elements * dtype.itemsize, cast_bytes)
    buffers.nonfinite, buffers.overflow = 0, True
    read = read_elements(piece)
    for first in range(0, read, piece_elements):
        count = min(piece_elements, read - first)
        raw = source[: count * dtype.itemsize]
        fill(buffer=raw.numpy().data, offset=offset + first * dtype.itemsize)
        crc.add(raw.numpy().data)
        count = min(count, numel - first)  # the rows dropped are read for the CRC alone
        if count <= 0:
            continue
        raw = raw[: count * dtype.itemsize]
        cast = raw.view(dtype.torch)
        if out_dtype != dtype:
            cast = target[: count * out_dtype.itemsize].view(out_dtype.torch).copy_(cast)
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
    crc.check()
    if not plan.allow_nonfinite and buffers.nonfinite:
        raise nonfinite_error(plan, item, buffers.nonfinite, buffers.overflow)
