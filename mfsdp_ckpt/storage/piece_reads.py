"""A stored chunk's raw bytes read a bounded window at a time into a caller's buffer, never
whole: export --verify reads its source this way beside the written file, and validate
--deep scans every tensor's values this way, so neither holds a tensor of gigabytes.

From local files the window is read with pread on a descriptor first checked to hold the
chunk's bytes; from a store with no descriptors (a URL, through tensorstore) by the store's
own read, which says a short read as the file and byte range it lacks.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Protocol, cast

from mfsdp_ckpt.check.removed_while_read import shrank_while_read
from mfsdp_ckpt.storage import tensorstore_store
from mfsdp_ckpt.storage.byte_store import CheckpointFileError, read_into

if TYPE_CHECKING:
    from mfsdp_ckpt.storage.reader import CheckpointReader

# Elements read at a time from local files, and an export's cast converts (4 MiB of fp32
# in, 2 MiB of bf16 out): small enough that the piece just read is still in cache when it
# is cast and the cast still in cache when it is written.
STREAM_PIECE_ELEMENTS = 1 << 20


class _FdStore(Protocol):
    """A byte store that hands out file descriptors (local disk)."""

    def open_fd(self, name: str) -> int: ...


def open_checked(reader: CheckpointReader, file: str, needed: int) -> int:
    """A descriptor of `file` (the caller closes it), checked to hold `needed` bytes."""
    fd = cast("_FdStore", reader.store).open_fd(file)
    try:
        check_size(fd, needed, reader.root / file)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_size(fd: int, needed: int, path: str | os.PathLike[str]) -> None:
    size = os.fstat(fd).st_size
    if size < needed:
        raise CheckpointFileError(
            f"{path}: needs {needed} bytes but the file has {size} (truncated?)"
        )


@contextmanager
def piece_reader(reader: CheckpointReader, file: str, needed: int) -> Iterator[Callable[..., None]]:
    """`fill(buffer=..., offset=...)` reading `file`, which must hold `needed` bytes: pread
    on a descriptor checked to hold them (closed after), else the store's own read."""
    if not hasattr(reader.store, "open_fd"):
        yield partial(read_into, reader.store, file)
        return
    fd = open_checked(reader, file, needed)
    try:
        yield partial(pread_exact, fd, path=reader.root / file)
    finally:
        os.close(fd)


def window_elements(reader: CheckpointReader, itemsize: int, largest: int) -> int:
    """Elements read at a time: `STREAM_PIECE_ELEMENTS` from local files; from a store
    without descriptors its read size, no larger than the `largest` piece to read (so a
    reader of small tensors keeps small buffers)."""
    if hasattr(reader.store, "open_fd"):
        return STREAM_PIECE_ELEMENTS
    read = max(1, tensorstore_store.READ_PIECE_BYTES // itemsize)
    return min(read, max(1, largest))


def pread_exact(fd: int, buffer: memoryview, offset: int, path: str | os.PathLike[str]) -> None:
    done = 0
    while done < len(buffer):
        count = os.preadv(fd, [buffer[done:]], offset + done)
        if count <= 0:  # its size was checked before the read
            raise shrank_while_read(fd, offset + len(buffer), path)
        done += count
