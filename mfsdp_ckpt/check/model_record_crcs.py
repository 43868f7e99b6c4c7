"""The CRC torch.save wrote for each model record of a step, recorded in its manifest.

A manifest's per-file digests prove a step's bytes are the ones saved, but checking one
means hashing its whole file, optimizer state included: export reads only the model's
records, so it hashes nothing (docs/reliability.md). Each record it reads passes the CRC
torch.save wrote for it, which finds a changed byte, but not a data file replaced by the
same-named file of another step (DCP names them `__R_T.distcp` in every step, and for one
model and world size their layouts match): each of its records carries its own, valid,
CRC. So a save also records in the manifest (`model_records`) the CRC of each model
record it wrote, by data file and the blob's offset in it (what `.metadata` gives each
chunk), read from the blobs' zip headers once the files are written (no payload byte is
read again); an export compares the CRC of each record it reads with it (`RecordedCrcs`),
while the bytes are checked against that same CRC as they pass. A tensor that did not
change between the steps (a frozen one) has the same bytes and CRC, and passes: its
values are the step's. A manifest written before records none: read as before.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.format.layout import DIST_CKPT_DIR
from mfsdp_ckpt.storage.reader import CheckpointReader, RawPayload

MODEL_PREFIX = "model."  # the `model` content kind's keys (checkpointer.CONTENT_KINDS)


def model_record_crcs(dist_ckpt: str | os.PathLike) -> dict[str, dict[str, int]]:
    """The written CRC of each raw model record in `dist_ckpt`, as the manifest records
    them: {"dist_ckpt/<data file>": {"<blob offset>": crc}}. Records written with no CRC,
    or not stored as raw bytes, are left out (an export reads them as before)."""
    reader = CheckpointReader(dist_ckpt)
    found: dict[str, dict[str, int]] = {}
    for entry in reader.tensors.values():
        if not entry.name.startswith(MODEL_PREFIX):
            continue
        for chunk in entry.chunks:
            payload = reader.raw_payload(entry, chunk)
            if chunk.file is None or payload is None or payload.crc is None:
                continue
            found.setdefault(f"{DIST_CKPT_DIR}/{chunk.file}", {})[str(chunk.file_offset)] = (
                payload.crc
            )
    return dict(sorted(found.items()))


class RecordedCrcs:
    """A manifest's `model_records`, to compare each record an export reads with."""

    def __init__(self, records: Mapping[str, Mapping[str, int]]):
        self.records = records

    def check(self, where: str, file: str, blob_offset: int, payload: RawPayload | None) -> None:
        """CheckpointFormatError (naming `where`: the file and key) when the manifest
        records a CRC for the blob at `blob_offset` of `file` and the record found there
        holds another (or is no longer raw bytes): the bytes, which are checked against
        the CRC found, are not the ones this step saved."""
        recorded = self.records.get(f"{DIST_CKPT_DIR}/{file}", {}).get(str(blob_offset))
        found = None if payload is None else payload.crc
        if recorded is not None and found != recorded:
            raise CheckpointFormatError(
                f"{where}: not the record this step saved (its CRC differs from the one"
                " manifest.json records for it: a data file of another step or save?)"
            )
