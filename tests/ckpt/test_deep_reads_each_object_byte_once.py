"""validate --deep reads each non-tensor blob's bytes once: the scan of their pickles (run
by every validate) and --deep's archive check of them (`object_archives`) are given the
same bytes, small blobs a run of neighbours at a time, a larger one whole. Each was read
twice: a Megatron-LM checkpoint's tens of thousands of optimizer settings, its RNG state
and its common entries, the second time for nothing."""

from __future__ import annotations

import collections

import torch

from mfsdp_ckpt.check.report import ERROR
from mfsdp_ckpt.check.validate import validate_checkpoint
from mfsdp_ckpt.storage.byte_store import LocalByteStore
from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.support.megatron_checkpoints import save_dcp


def _state() -> dict:
    return {
        "model": {"w": torch.ones(4, 4)},
        "settings": {f"s{i}": {"lr": 1e-3 * i, "betas": (0.9, 0.95)} for i in range(12)},
        "rng": b"\x01" * (100 << 10),  # past a small blob's size: read on its own
    }


def _times_read(monkeypatch, ckpt) -> dict[str, int]:
    """validate --deep of `ckpt`: how many times each non-tensor entry's most-read byte
    was read (0: never), counting every read of the store but `files_not_readable`'s probe
    of each data file (its first byte, before each check that reads the file)."""
    reads: list[tuple[str, int, int]] = []
    read_range, read_into = LocalByteStore.read_range, LocalByteStore.read_into

    def counted_range(self, name, offset, length):
        reads.append((name, offset, length))
        return read_range(self, name, offset, length)

    def counted_into(self, name, offset, buffer):
        reads.append((name, offset, len(buffer)))
        return read_into(self, name, offset, buffer)

    monkeypatch.setattr(LocalByteStore, "read_range", counted_range)
    monkeypatch.setattr(LocalByteStore, "read_into", counted_into)
    report = validate_checkpoint(ckpt, deep=True)
    monkeypatch.undo()
    times = {}
    for name, entry in CheckpointReader(ckpt).objects.items():
        start, end = entry.file_offset, entry.file_offset + entry.length
        per_byte = collections.Counter()
        for file, offset, length in reads:
            if file == entry.file and (offset, length) != (0, 1):
                per_byte.update(range(max(offset, start), min(offset + length, end)))
        times[name] = max(per_byte.values(), default=0)
        assert len(per_byte) in (0, entry.length), name  # read whole, or not at all
    times["errors"] = sum(f.severity == ERROR for f in report.findings)
    return times


def test_each_non_tensor_byte_is_read_once(tmp_path, monkeypatch):
    ckpt = save_dcp(_state(), tmp_path / "ck")
    times = _times_read(monkeypatch, ckpt)
    assert times.pop("errors") == 0
    assert len(times) > 12 and set(times.values()) == {1}, times


def test_a_changed_byte_is_still_found_by_the_archive_check(tmp_path, monkeypatch):
    """The archive check judges the bytes the pickle scan read: a blob's stored member whose
    CRC no longer matches is still an error (the large blob's, read whole for both)."""
    ckpt = save_dcp(_state(), tmp_path / "ck")
    entry = CheckpointReader(ckpt).objects["rng"]
    data = ckpt / (entry.file or "")
    raw = bytearray(data.read_bytes())
    at = raw.index(b"\x01" * 64, entry.file_offset)  # inside its stored payload
    raw[at] = 2
    data.write_bytes(bytes(raw))
    found = [f for f in validate_checkpoint(ckpt, deep=True).findings if f.severity == ERROR]
    crc = [f for f in found if f.where == "[rng]" and "fails its CRC" in f.message]
    assert len(crc) == 1, found
