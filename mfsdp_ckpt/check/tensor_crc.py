"""The CRC check of a tensor's stored bytes, for the reads that pass each of them through
memory (validate --deep, export --verify).

torch.save writes a CRC for every record, so a verl, Megatron-LM or torchtitan save carries
one for each tensor even with no manifest, and then it is the only evidence that the bytes
are the ones saved: torch.load checks none, so a flipped bit, or a payload read from the
wrong start, loads as values. The rule is `zip_crc`'s (a CRC of 0 was not written: the bytes
are read unchecked), and a failure reads as an object blob's does ("fails its CRC").
"""

from __future__ import annotations

import zipfile
import zlib

from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.format.zip_crc import first_bad_member
from mfsdp_ckpt.storage.byte_store import RangeFile
from mfsdp_ckpt.storage.reader import CheckpointReader, Chunk, RawPayload


def crc_failure(where: str, record: str) -> CheckpointFormatError:
    """The error of a record whose bytes fail the CRC written for them, naming `where`."""
    return CheckpointFormatError(f"{where}: blob member {record} fails its CRC (bytes changed)")


class PayloadCrc:
    """The CRC of a raw payload accumulated over the windows read of it, in order, and
    compared with the written one once all are in (`check`)."""

    def __init__(self, payload: RawPayload, where: str):
        self.payload, self.where, self.crc = payload, where, 0

    def add(self, window: memoryview | bytes) -> None:
        if self.payload.crc is not None:
            self.crc = zlib.crc32(window, self.crc)

    def check(self) -> None:
        """CheckpointFormatError when a CRC was written and the bytes read do not match it."""
        if self.payload.crc is not None and self.crc != self.payload.crc:
            raise crc_failure(self.where, self.payload.record)


def check_blob_crcs(reader: CheckpointReader, chunk: Chunk, where: str) -> None:
    """A chunk's blob read whole through zipfile (a piece at a time) with each written CRC
    checked (`first_bad_member`), for a chunk decoded rather than read raw. A blob zipfile
    cannot open is left to the decoding, which names it."""
    if chunk.file is None:
        return
    blob = RangeFile(reader.store, chunk.file, chunk.file_offset, chunk.length)
    try:
        failed = first_bad_member(zipfile.ZipFile(blob))
    except (zipfile.BadZipFile, ValueError, EOFError, NotImplementedError):
        return
    if failed is not None:
        raise crc_failure(where, failed)


__all__ = ["PayloadCrc", "check_blob_crcs", "crc_failure"]
