"""The CRCs of a torch.save blob's records, taken from the bytes torch.load reads of them.

A record read raw is checked as its bytes land (`tensor_crc`); one torch must decode (a
non-contiguous tensor, a storage larger than its chunk, another writer's pickle) was
read by torch.load, which checks no CRC, and checking it through zipfile read the blob a
second time. Here the store the decoding reads through hands each read on to the records
it continues: a record read whole in order is checked with no read of its own. A record
read in part (a small one, its tail served from a block read earlier) or compressed (torch
inflates it; torch.save writes none) is read again on its own, a piece at a time; one the
decoding never read reached no tensor, and is read only where the caller asks for every
record (--verify, as validate --deep checks every blob).
"""

from __future__ import annotations

import zipfile
import zlib
from dataclasses import dataclass

from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.format.blob_guard import open_blob
from mfsdp_ckpt.format.zip_crc import READ_PIECE_BYTES, crc_written, open_member
from mfsdp_ckpt.storage.byte_store import ByteStore, RangeFile, read_into
from mfsdp_ckpt.storage.zip_payload import payload_start


@dataclass
class WatchedRecord:
    """One stored record of a blob: its bytes [start, end) in the data file, the CRC over
    those read so far in order (up to `seen`), and the CRC written for them."""

    info: zipfile.ZipInfo
    start: int
    end: int
    seen: int
    crc: int = 0

    def add(self, offset: int, data: memoryview) -> None:
        """Bytes read at `offset` of the data file: those continuing the record's are added."""
        if self.seen < self.end and offset <= self.seen < offset + len(data):
            upto = min(self.end, offset + len(data))
            self.crc = zlib.crc32(data[self.seen - offset : upto - offset], self.crc)
            self.seen = upto

    @property
    def read_whole(self) -> bool:
        return self.seen == self.end


class WatchingStore:
    """`store`, whose reads of the data file `file` are handed to `records` as they pass.
    It offers no descriptor (`open_fd`): every read of the decoding goes through it."""

    def __init__(self, store: ByteStore, file: str, records: list[WatchedRecord]):
        self.inner, self.file, self.records = store, file, records
        self.root = store.root

    def size(self, name: str) -> int | None:
        return self.inner.size(name)

    def list_files(self) -> list[str]:
        return self.inner.list_files()

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        data = self.inner.read_range(name, offset, length)
        self._saw(name, offset, memoryview(data))
        return data

    def read_into(self, name: str, offset: int, buffer: memoryview) -> None:
        read_into(self.inner, name, offset, buffer)
        self._saw(name, offset, memoryview(buffer).cast("B"))

    def _saw(self, name: str, offset: int, data: memoryview) -> None:
        if name == self.file:
            for record in self.records:
                record.add(offset, data)


class BlobRecords:
    """The records of one blob (`blob`, a file over exactly its bytes) with a written CRC,
    each watched where its bytes are stored as they are (`watching`): a compressed record,
    or one whose header `payload_start` refuses, is left to `first_bad`'s read of its own.
    A blob that is no torch.save archive, or lists more records than torch.save writes, is
    refused as the decoding refuses it (`open_blob`, CheckpointFormatError), so the work
    per read stays that of a few records."""

    def __init__(self, blob: RangeFile, where: str):
        self.blob, self.where = blob, where
        self.archive = open_blob(blob, blob.length, where)
        self.watched: list[WatchedRecord] = []
        self.unwatched: list[zipfile.ZipInfo] = []
        for info in self.archive.infolist():
            if not crc_written(info):
                continue
            start = self._stored_start(info)
            if start is None:
                self.unwatched.append(info)
            else:
                end = start + info.compress_size
                self.watched.append(WatchedRecord(info, start, end, start))

    def _stored_start(self, info: zipfile.ZipInfo) -> int | None:
        """Where `info`'s bytes start in the data file, when stored as they are."""
        if info.compress_type != zipfile.ZIP_STORED:
            return None
        try:
            at = payload_start(self.blob, self.archive, info, info.compress_size, self.where)
        except CheckpointFormatError:  # the decoding names what is wrong with it
            return None
        return self.blob.base + at

    def watching(self, store: ByteStore) -> WatchingStore:
        """`store`, handing the reads of this blob's data file to its watched records."""
        return WatchingStore(store, self.blob.name, self.watched)

    def first_bad(self, unread_too: bool) -> str | None:
        """The name of the first record whose bytes fail the CRC written for them, else
        None: a record read whole is judged by what was read; one read in part, or not
        watched, is read again; one never read only where `unread_too`."""
        for record in self.watched:
            if record.read_whole and record.crc != record.info.CRC:
                return record.info.filename
        again = [
            r.info for r in self.watched if not r.read_whole and (unread_too or r.seen > r.start)
        ]
        for info in again + self.unwatched:
            try:
                with open_member(self.archive, info) as handle:
                    while handle.read(READ_PIECE_BYTES):
                        pass
            except zipfile.BadZipFile:
                return info.filename
        return None
