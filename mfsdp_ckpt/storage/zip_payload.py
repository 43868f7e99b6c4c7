"""Where a stored record's raw bytes start inside its torch.save blob, from the record's zip
local header, and proof that they lie inside that blob.

The raw reads (validate --deep's windows, export's file-to-file copy and --verify's reread)
go straight to a byte offset in the data file, past torch's zip reader, which would have
checked the record for them. Several blobs share one `.distcp` file, so a payload offset
taken on trust from the header (a name or extra field longer than written, a central
directory entry pointing at another record's header) reads the next blob's bytes as this
tensor's values: a corrupt blob passes as valid, or is blamed on a diverged run, and export
writes shifted weights. Only the 30-byte header and its name are read, never the payload.
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


def payload_start(
    blob: RangeFile,
    archive: zipfile.ZipFile,
    record: zipfile.ZipInfo,
    payload_bytes: int,
    where: str,
) -> int:
    """Offset in `blob` (a file over exactly the blob's bytes, opened as `archive`) of
    `record`'s `payload_bytes` stored bytes. CheckpointFormatError ("unreadable blob", naming
    `where`) when the local header is missing, names another record, says the bytes are
    compressed, or places them where they would run into the next record (or the central
    directory, or past the blob's end)."""
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
    if method != zipfile.ZIP_STORED:
        raise refuse(f"is compressed (method {method}); torch.save stores records uncompressed")
    local_name = blob.read(name_len) or b""
    decoded = local_name.decode("utf-8" if flags & _UTF8_NAME else "cp437", errors="replace")
    if len(local_name) != name_len or decoded != record.orig_filename:
        raise refuse(f"has a local header naming {cut_to(repr(decoded), 80)}")
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
