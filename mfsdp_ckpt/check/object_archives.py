"""Whether each non-tensor blob (args, iteration, RNG state, scheduler) is a whole
torch.save archive whose stored members match their CRCs: validate --deep's check of them,
as a zip container only (the pickle inside is never loaded, so nothing in it is built).

The verdicts are worked out from bytes another check already read: validate's scan of
every blob's pickle (`object_pickles`) reads each blob once and hands its bytes here too,
so --deep reads no non-tensor byte a second time. Blobs of equal bytes are checked once:
Megatron's distributed optimizer saves ~20 small settings per parameter, tens of
thousands of blobs of a few distinct values.
"""

from __future__ import annotations

import hashlib
import io
import zipfile

from mfsdp_ckpt.check.report import ERROR, WARNING
from mfsdp_ckpt.format.zip_crc import first_bad_member
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.reader import ObjectEntry

MAX_OBJECT_CHECK_BYTES = 64 << 20  # larger non-tensor blobs are checked for size only
# (severity, message) of a blob that is no whole archive; None: it is one
Verdict = tuple[str, str] | None


def archive_checked(entry: ObjectEntry) -> bool:
    """Whether `entry`'s blob is checked as an archive: stored (a file named), as written
    (a transformed one is no zip until decoded) and at most MAX_OBJECT_CHECK_BYTES."""
    return (
        entry.file is not None and not entry.transforms and entry.length <= MAX_OBJECT_CHECK_BYTES
    )


class ArchiveVerdicts:
    """Each checked entry's verdict by name (`found`), or the error reading its bytes; one
    verdict per distinct blob, kept by digest (memory holds a digest per distinct blob and
    a verdict per entry, never the blobs)."""

    def __init__(self) -> None:
        self.found: dict[str, Verdict | CheckpointFileError] = {}
        self._seen: dict[bytes, Verdict] = {}

    def add(self, entry: ObjectEntry, raw: bytes | CheckpointFileError) -> None:
        """The verdict of `entry`'s blob, given its bytes (`raw`) or the error reading them."""
        if isinstance(raw, CheckpointFileError):
            self.found[entry.name] = raw
            return
        digest = hashlib.sha256(raw).digest()
        if digest not in self._seen:
            self._seen[digest] = archive_problem(raw)
        self.found[entry.name] = self._seen[digest]


def archive_problem(raw: bytes) -> Verdict:
    """(severity, message) of a blob that is no whole torch.save archive, or None."""
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as archive:
            members = archive.infolist()
            if not any(m.filename.endswith("data.pkl") for m in members):
                return ERROR, "blob is not a torch.save archive (no data.pkl)"
            if any(m.compress_type != zipfile.ZIP_STORED for m in members):
                return WARNING, "blob has compressed members (torch.save never writes them)"
            failed = first_bad_member(archive)
            if failed is not None:
                return ERROR, f"blob member {failed} fails its CRC (bytes changed)"
    except (zipfile.BadZipFile, ValueError, EOFError) as err:
        return ERROR, f"blob is not a readable torch.save archive ({err})"
    return None


__all__ = [
    "MAX_OBJECT_CHECK_BYTES",
    "ArchiveVerdicts",
    "Verdict",
    "archive_checked",
    "archive_problem",
]
