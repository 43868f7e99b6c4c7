"""The bytes of many small non-tensor blobs, read a run of neighbours at a time.

A Megatron-LM checkpoint stores tens of thousands of ~1.3 KB non-tensor entries side by
side (its distributed optimizer's `param_to_group_meta`: ~20 settings per parameter), and
each read of one opens and checks its data file anew, ~1 ms apiece. The checks that read
every blob (validate's pickle scan and its --deep archive check, inspect's summary of
those settings) read runs of neighbours in one go instead, and get them one run at a time:
memory holds one run, not every blob.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.reader import CheckpointReader, ObjectEntry

SMALL_BLOB_BYTES = 64 << 10  # read whole, with its neighbours; larger: by their own reads
RUN_BYTES = 4 << 20  # neighbouring small blobs read in one go


def small_blobs(
    reader: CheckpointReader, entries: Iterable[ObjectEntry]
) -> Iterator[tuple[ObjectEntry, bytes | CheckpointFileError]]:
    """The bytes of each of `entries` of at most SMALL_BLOB_BYTES (or the error reading
    them), by file and offset, a run of neighbours at a time; larger ones are left out."""
    small = sorted(
        (e for e in entries if e.file is not None and e.length <= SMALL_BLOB_BYTES),
        key=lambda e: (e.file or "", e.file_offset),
    )
    run: list[ObjectEntry] = []
    for entry in [*small, None]:
        if run and (
            entry is None
            or entry.file != run[0].file
            or entry.file_offset + entry.length - run[0].file_offset > RUN_BYTES
        ):
            yield from _read_run(reader, run)
            run = []
        if entry is not None:
            run.append(entry)


def _read_run(
    reader: CheckpointReader, run: list[ObjectEntry]
) -> Iterator[tuple[ObjectEntry, bytes | CheckpointFileError]]:
    start = run[0].file_offset
    end = max(e.file_offset + e.length for e in run)
    try:
        data = reader.store.read_range(run[0].file or "", start, end - start)
    except CheckpointFileError as err:
        for entry in run:
            yield entry, err
        return
    for entry in run:
        yield entry, data[entry.file_offset - start : entry.file_offset - start + entry.length]


__all__ = ["RUN_BYTES", "SMALL_BLOB_BYTES", "small_blobs"]
