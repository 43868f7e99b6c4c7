"""The CRC check of a tensor's stored bytes, for the reads that pass each of them through
memory (validate --deep, export-hf and its --verify).

torch.save writes a CRC for every record, so a verl, Megatron-LM or torchtitan save carries
one for each tensor even with no manifest, and then it is the only evidence that the bytes
are the ones saved: torch.load checks none, so a flipped bit, or a payload read from the
wrong start, loads as values. The rule is `zip_crc`'s (a CRC of 0 was not written: the bytes
are read unchecked), and a failure reads as an object blob's does ("fails its CRC").
"""

from __future__ import annotations

import copy
import zipfile
import zlib
from typing import TYPE_CHECKING

from mfsdp_ckpt.check.decoded_record_crc import BlobRecords
from mfsdp_ckpt.check.model_record_crcs import RecordedCrcs
from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.format.zip_crc import first_bad_member
from mfsdp_ckpt.storage.byte_store import RangeFile
from mfsdp_ckpt.storage.piece_reads import piece_reader, window_elements
from mfsdp_ckpt.storage.reader import CheckpointReader, Chunk, RawPayload, TensorEntry
from mfsdp_ckpt.storage.tensor_memory import tensor_memory

if TYPE_CHECKING:
    import torch


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


class CrcCheckedReader(CheckpointReader):
    """A reader whose every chunk read checks the CRC written for the chunk's bytes, for the
    export's own reads and --verify's whole conversions (a fused QKV or gate/up split,
    stacked experts, a merged LoRA delta), so each caller is checked without knowing of it.
    A chunk of raw bytes is read straight into its tensor's memory a window at a time, each
    window added to its CRC as it lands (read once, never decoded by torch, which checks no
    CRC). A blob torch decodes is checked from the bytes torch reads of it
    (`decoded_record_crc`), in the same read: a record the decoding never read is read on
    its own only where `decoded_too` (--verify; the export's output holds none of its
    bytes). A blob stored transformed (compressed by DCP's extensions) is checked through
    zipfile before it is decoded, where `decoded_too`: that reads it a second time. Memory
    is the chunk's, as with a plain reader. Where the step's manifest records the CRC of
    each model record (`recorded`), the CRC a raw record is checked against must be the
    recorded one: a data file of another step passes its own CRCs (`model_record_crcs`)."""

    decoded_too = True
    recorded: RecordedCrcs | None = None

    @classmethod
    def over(
        cls,
        reader: CheckpointReader,
        *,
        decoded_too: bool = True,
        recorded: RecordedCrcs | None = None,
    ) -> CrcCheckedReader:
        """`reader`'s tables, parsed once, shared (no reader changes them) under this
        class's reads; `decoded_too`: whether what the decoding does not read of a blob
        (a record it skips, a blob stored transformed) is checked too, by a read of its
        own; `recorded`: the manifest's CRC of each model record, if it records them."""
        checked = cls.__new__(cls)
        vars(checked).update(vars(reader))
        checked.decoded_too, checked.recorded = decoded_too, recorded
        return checked

    def raw_payload(self, entry: TensorEntry, chunk: Chunk) -> RawPayload | None:
        """As a plain reader's, refused (CheckpointFormatError naming the file and key)
        where the manifest records another CRC for the record: every raw read, streamed
        (`export_stream.raw_pieces`) or whole (`read_chunk`), starts here."""
        payload = super().raw_payload(entry, chunk)
        if self.recorded is not None and chunk.file is not None:
            where = f"{self.root / chunk.file} [{entry.name}]"
            self.recorded.check(where, chunk.file, chunk.file_offset, payload)
        return payload

    def read_chunk(self, entry: TensorEntry, chunk: Chunk) -> torch.Tensor:
        payload = self.raw_payload(entry, chunk)
        where = f"{self.root / (chunk.file or '?')} [{entry.name}]"
        if chunk.file is None:
            return super().read_chunk(entry, chunk)
        if payload is None:
            return self._read_decoded(entry, chunk, chunk.file, where)
        with tensor_memory(where, chunk.numel * entry.dtype.itemsize, "reading this chunk"):
            return self._read_raw(entry, chunk, chunk.file, PayloadCrc(payload, where))

    def _read_decoded(
        self, entry: TensorEntry, chunk: Chunk, file: str, where: str
    ) -> torch.Tensor:
        """A chunk torch decodes, read through a store that hands each read of its blob to
        the blob's records (`BlobRecords`), whose CRCs are checked once it is decoded."""
        blob = RangeFile(self.store, file, chunk.file_offset, chunk.length)
        try:
            records = None if chunk.transforms else BlobRecords(blob, where)
        except (CheckpointFormatError, zipfile.BadZipFile, ValueError, EOFError):
            records = None  # no archive to watch: the decoding names what it is
        if records is None:
            if self.decoded_too:
                check_blob_crcs(self, chunk, where)
            return super().read_chunk(entry, chunk)
        watched = copy.copy(self)  # a store of its own: other threads read through `self`
        watched.store = records.watching(self.store)
        value = CheckpointReader.read_chunk(watched, entry, chunk)
        failed = records.first_bad(unread_too=self.decoded_too)
        if failed is not None:
            raise crc_failure(where, failed)
        return value

    def _read_raw(
        self, entry: TensorEntry, chunk: Chunk, file: str, crc: PayloadCrc
    ) -> torch.Tensor:
        import torch

        size, start = entry.dtype.itemsize, crc.payload.offset
        out = torch.empty(chunk.sizes, dtype=entry.dtype.torch)
        flat = out.reshape(-1).view(torch.uint8)
        window = window_elements(self, size, chunk.numel) * size
        with piece_reader(self, file, start + len(flat)) as fill:
            for first in range(0, len(flat), window):
                part = flat[first : first + window].numpy().data
                fill(buffer=part, offset=start + first)
                crc.add(part)
        crc.check()
        return out


__all__ = ["CrcCheckedReader", "PayloadCrc", "check_blob_crcs", "crc_failure"]
