"""Where a stored record's raw bytes start inside its torch.save blob, from the record's zip
local header, and proof that they lie inside that blob.

The raw reads (validate --deep's windows, export's file-to-file copy and --verify's reread)
go straight to a byte offset in the data file, past torch's zip reader, which would have
checked the record for them. Several blobs share one `.distcp` file, so a payload offset
taken on trust from the header (a name or extra field longer than written, a central
directory entry pointing at another record's header) reads the next blob's bytes as this
tensor's values: a corrupt blob passes as valid, or is blamed on a diverged run, and export
writes shifted weights. Only the 30-byte header, its name and its extra field are read,
never the payload.

The header must also agree with the central directory, as the record torch.load would read:
its sizes and CRC (or zeros, where a data descriptor carries them), and an extra field made
of whole fields (a shortened extra length moves the payload start onto header bytes, which
torch.load reads as values too). A record flagged encrypted, strongly encrypted or patched
data (central or local flags) is refused: miniz, and so torch.load and a resume, refuse it
("unsupported encryption"), and the raw reads must accept exactly what torch accepts.
"""

from __future__ import annotations

import struct
import zipfile

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.storage.byte_store import RangeFile

_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")  # zip's fixed local file header, 30 bytes
_LOCAL_SIGNATURE = b"PK\x03\x04"
_UTF8_NAME = 0x800  # general-purpose flag: the name is UTF-8, not cp437
_DATA_DESCRIPTOR = 0x8  # general-purpose flag: sizes and CRC follow the data (zeros here)
_REFUSED_FLAGS = {0x1: "encrypted", 0x20: "patched data", 0x40: "strongly encrypted"}
_ZIP64_SIZE = 0xFFFFFFFF  # a local size too large for 32 bits: the zip64 extra holds it


def payload_start(
    blob: RangeFile,
    archive: zipfile.ZipFile,
    record: zipfile.ZipInfo,
    payload_bytes: int,
    where: str,
) -> int:
    """Offset in `blob` (a file over exactly the blob's bytes, opened as `archive`) of
    `record`'s `payload_bytes` stored bytes. CheckpointFormatError ("unreadable blob", naming
    `where`) when the record is flagged encrypted or patched, or its local header is
    missing, names another record, disagrees with the central directory (sizes, CRC, a
    broken extra field), says the bytes are compressed, or places them where they would
    run into the next record (or the central directory, or past the blob's end)."""
    name = cut_to(repr(record.filename), 80)

    def refuse(why: str) -> CheckpointFormatError:
        return CheckpointFormatError(f"{where}: unreadable blob (record {name} {why})")

    at, blob_length = record.header_offset, blob.length
    if not 0 <= at <= blob_length - _LOCAL_HEADER.size:
        raise refuse(f"has its header at byte {at}, outside the {blob_length}-byte blob")
    blob.seek(at)
    fixed = blob.read(_LOCAL_HEADER.size) or b""
    if len(fixed) != _LOCAL_HEADER.size or fixed[:4] != _LOCAL_SIGNATURE:
        raise refuse(f"has no local header at byte {at} of the blob")
    fields = _LOCAL_HEADER.unpack(fixed)
    flags, method, name_len, extra_len = fields[2], fields[3], fields[9], fields[10]
    for where_flags, set_in in ((record.flag_bits, "central directory"), (flags, "local header")):
        refused = [why for bit, why in _REFUSED_FLAGS.items() if where_flags & bit]
        if refused:
            raise refuse(
                f"is flagged {' and '.join(refused)} in its {set_in}; torch cannot read it"
            )
    if method != zipfile.ZIP_STORED:
        raise refuse(f"is compressed (method {method}); torch.save stores records uncompressed")
    local_name = blob.read(name_len) or b""
    decoded = local_name.decode("utf-8" if flags & _UTF8_NAME else "cp437", errors="replace")
    if len(local_name) != name_len or decoded != record.orig_filename:
        raise refuse(f"has a local header naming {cut_to(repr(decoded), 80)}")
    disagreement = _disagreement(fields, record)
    if disagreement:
        raise refuse(f"has a local header whose {disagreement}")
    if not _whole_fields(blob.read(extra_len) or b"", extra_len):
        raise refuse(f"has a local extra field of {extra_len} bytes that is not whole fields")
    start = at + _LOCAL_HEADER.size + name_len + extra_len
    bounds = [
        (i.header_offset, f"record {cut_to(repr(i.filename), 80)}") for i in archive.infolist()
    ]
    bounds += [(archive.start_dir, "the central directory"), (blob_length, "the blob's end")]
    end, what = min((b for b in bounds if b[0] > at), key=lambda b: b[0])
    if start + payload_bytes > end:
        raise refuse(
            f"places its {payload_bytes} bytes at [{start}, {start + payload_bytes}),"
            f" past {what} at byte {end} of the {blob_length}-byte blob"
        )
    return start


def _disagreement(fields: tuple, record: zipfile.ZipInfo) -> str | None:
    """What of a local header's CRC and sizes the central directory contradicts (zeros where
    a data descriptor follows the data are no claim; a zip64 marker defers to its extra)."""
    crc, compressed, size = fields[6], fields[7], fields[8]
    told = fields[2] & _DATA_DESCRIPTOR
    for value, central, what in (
        (crc, record.CRC, "CRC"),
        (compressed, record.compress_size, "stored size"),
        (size, record.file_size, "size"),
    ):
        if value == central or (told and value == 0) or (what != "CRC" and value == _ZIP64_SIZE):
            continue
        return f"{what} {value} disagrees with the central directory's {central}"
    return None


def _whole_fields(extra: bytes, extra_len: int) -> bool:
    """Whether `extra` (a local header's extra field) is `extra_len` bytes of whole
    (id, length, data) fields, as every zip writer lays it out."""
    if len(extra) != extra_len:
        return False
    at = 0
    while at < extra_len:
        if at + 4 > extra_len:
            return False
        (length,) = struct.unpack_from("<H", extra, at + 2)
        at += 4 + length
    return at == extra_len
