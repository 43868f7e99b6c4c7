"""Small tensor blobs read a run of neighbours at a time, for validate --deep.

A Megatron-FSDP mixture of experts saves every expert as a parameter of its own: thousands
of small tensors (and their Adam states) side by side in one data file. Read one at a time,
each costs a store read (resolve the path, open, check, close) for a blob of a few KB.
`reading_ahead` has the reader's store serve those reads from runs of neighbouring blobs
instead, one run in memory at a time: a run holds blobs that follow each other with no gap,
so no byte outside a blob is read and, taken in the file's order (DCP's, which the metadata
keeps), each byte is read once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from mfsdp_ckpt.check.blob_runs import RUN_BYTES, SMALL_BLOB_BYTES
from mfsdp_ckpt.storage.byte_store import ByteStore, CheckpointFileError, read_into
from mfsdp_ckpt.storage.reader import CheckpointReader

Range = tuple[str, int, int]  # (file, offset, length)


class ReadAhead:
    """A ByteStore over `store` that reads each of `ranges` of at most SMALL_BLOB_BYTES
    with its run (see module docstring); any other read goes to `store` as it is."""

    def __init__(self, store: ByteStore, ranges: Iterable[Range]):
        self.store, self.root = store, store.root
        self._runs: list[Range] = []
        self._run_of: dict[Range, int] = {}
        for file, offset, length in sorted({r for r in ranges if r[2] <= SMALL_BLOB_BYTES}):
            last = self._runs[-1] if self._runs else None
            if (
                last is not None
                and last[0] == file
                and last[1] <= offset <= last[1] + last[2]  # no gap: no byte of nothing read
                and offset + length - last[1] <= RUN_BYTES
            ):
                self._runs[-1] = (file, last[1], max(last[2], offset + length - last[1]))
            else:
                self._runs.append((file, offset, length))
            self._run_of[(file, offset, length)] = len(self._runs) - 1
        self._held: tuple[int, bytes] = (-1, b"")

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        run = self._run_of.get((name, offset, length))
        if run is None:
            return self.store.read_range(name, offset, length)
        _file, start, size = self._runs[run]
        if self._held[0] != run:
            try:
                self._held = (run, self.store.read_range(name, start, size))
            except CheckpointFileError:  # said of this blob's own bytes, as without a run
                return self.store.read_range(name, offset, length)
        return self._held[1][offset - start : offset - start + length]

    def read_into(self, name: str, offset: int, buffer: memoryview) -> None:
        read_into(self.store, name, offset, buffer)

    def size(self, name: str) -> int | None:
        return self.store.size(name)

    def list_files(self) -> list[str]:
        return self.store.list_files()


@contextmanager
def reading_ahead(reader: CheckpointReader, ranges: Iterable[Range]) -> Iterator[None]:
    """`reader` reads `ranges` through a ReadAhead until the block ends."""
    store = reader.store
    reader.store = ReadAhead(store, ranges)
    try:
        yield
    finally:
        reader.store = store


__all__ = ["ReadAhead", "reading_ahead"]
