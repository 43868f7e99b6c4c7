"""Check a torch.save blob's structure before anything unpacks it.

Each DCP blob is a zip archive (torch.save's format) holding a pickle (`data.pkl`) and one
record per storage. Loading it hands the archive to torch's zip reader and the pickle to
its weights-only unpickler, which admit no code but bound nothing: a DEFLATE member
inflates without limit, a central directory of millions of entries becomes millions of
Python objects, a `data.pkl` of EMPTY_DICT opcodes allocates tens of bytes per byte, and a
storage may claim far more elements than its record holds. torch.save writes none of
these (it stores members uncompressed, a handful per tensor), so `open_blob` refuses them
from the end-of-archive record and the member table, reading only those. Errors are one
line, `CheckpointFormatError`.
"""

from __future__ import annotations

import zipfile
from io import RawIOBase
from typing import BinaryIO

from mfsdp_ckpt.check.printable import cut_to, error_line
from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.format.restricted_pickle import DETAIL_CHARS, PickleRefused, check_pickle_budget
from mfsdp_ckpt.format.zip_crc import read_member
from mfsdp_ckpt.storage.tensor_memory import reraise_if_out_of_memory

MAX_MEMBERS = 4096  # a tensor blob has 7; an object blob one more per tensor it holds
MAX_DIRECTORY_BYTES = 1 << 20
MAX_PICKLE_BYTES = 64 << 20
# What torch's unpickler may retain for one blob's pickle (restricted_pickle's costs): a
# tensor's pickle is charged ~5 KB; an object blob's grows with its values.
PICKLE_BUDGET = 64 << 20


def open_blob(file: BinaryIO | RawIOBase, length: int, where: str) -> zipfile.ZipFile:
    """The blob as a zip archive, after refusing what torch.save never writes."""
    try:
        # the end record (zip64 aware); reads <= 64 KiB. zipfile's private API, not in typeshed.
        end = zipfile._EndRecData(file)  # type: ignore[attr-defined]
    except OSError:
        raise
    except Exception as err:
        reraise_if_out_of_memory(err)  # the machine's limit, not the file's fault
        raise CheckpointFormatError(f"{where}: unreadable blob ({type(err).__name__})") from None
    if end is None:
        raise CheckpointFormatError(f"{where}: unreadable blob (not a torch.save zip archive)")
    members = end[zipfile._ECD_ENTRIES_TOTAL]  # type: ignore[attr-defined]
    directory = end[zipfile._ECD_SIZE]  # type: ignore[attr-defined]
    if members > MAX_MEMBERS or directory > MAX_DIRECTORY_BYTES:
        raise CheckpointFormatError(
            f"{where}: blob lists {members} members in {directory} bytes, more than torch.save "
            "writes"
        )
    try:
        archive = zipfile.ZipFile(file)
    except OSError:
        raise
    except Exception as err:
        reraise_if_out_of_memory(err)  # the machine's limit, not the file's fault
        raise CheckpointFormatError(
            f"{where}: unreadable blob ({error_line(err, limit=DETAIL_CHARS)})"
        ) from None
    for info in archive.infolist():
        if info.compress_type != zipfile.ZIP_STORED:
            raise CheckpointFormatError(
                f"{where}: blob member {cut_to(repr(info.filename), 80)} is compressed;"
                " torch.save stores members uncompressed"
            )
        if info.file_size > length or info.header_offset > length:
            raise CheckpointFormatError(
                f"{where}: blob member {cut_to(repr(info.filename), 80)} claims"
                f" {info.file_size} bytes in a {length}-byte blob"
            )
    return archive


def blob_pickle(archive: zipfile.ZipFile, where: str) -> bytes:
    """The one `data.pkl` of a checked archive, after its memory budget and memo check."""
    pickles = [i for i in archive.infolist() if i.filename.endswith("data.pkl")]
    if len(pickles) != 1:
        raise CheckpointFormatError(
            f"{where}: blob holds {len(pickles)} pickles, torch.save writes one"
        )
    if pickles[0].file_size > MAX_PICKLE_BYTES:
        raise CheckpointFormatError(
            f"{where}: blob pickle of {pickles[0].file_size} bytes is too large"
        )
    try:  # its CRC checked where torch.save wrote one (`zip_crc`)
        data = read_member(archive, pickles[0])
    except OSError:
        raise
    except Exception as err:  # a damaged local header or CRC: zipfile's own error types
        reraise_if_out_of_memory(err)  # the machine's limit, not the file's fault
        raise CheckpointFormatError(
            f"{where}: unreadable blob ({error_line(err, limit=DETAIL_CHARS)})"
        ) from None
    try:
        check_pickle_budget(data, PICKLE_BUDGET, "blob pickle")
    except PickleRefused as err:
        raise CheckpointFormatError(f"{where}: {err}") from None
    return data


def check_blob(file: BinaryIO | RawIOBase, length: int, where: str) -> None:
    """Everything above, for a blob about to be handed to torch.load; rewinds `file`."""
    blob_pickle(open_blob(file, length, where), where)
    file.seek(0)
