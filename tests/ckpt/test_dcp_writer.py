"""The save's storage writer hashes data files while writing them; the digests must be
those of the files on disk, and a stream that seeks must not get a digest at all."""

from __future__ import annotations

import io
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
import xxhash

from mfsdp_ckpt import checkpointer as checkpointer_module
from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.format.file_hash import FileRecord
from mfsdp_ckpt.format.manifest import read_manifest
from mfsdp_ckpt.storage.dcp_writer import CheckedWriter, _HashingStream


def _xxh3_record(path: Path) -> FileRecord:
    data = path.read_bytes()
    return FileRecord(len(data), xxhash.xxh3_128(data).hexdigest(), "xxh3_128")


def test_data_files_are_hashed_as_written(tmp_path):
    state = {
        "w": torch.randn(300, 70),
        "ids": torch.arange(1000),
        "half": torch.randn(33).half(),
        "extra": {"step": 3},
    }
    writer = CheckedWriter(str(tmp_path), thread_count=2)
    dcp.save(state, storage_writer=writer)
    hashed = writer.hashed_while_written()
    data_files = sorted(p for p in tmp_path.glob("__*.distcp"))
    assert len(data_files) == 2  # one per writer thread
    for path in data_files:
        assert hashed[path.name] == _xxh3_record(path)


def test_stream_that_seeks_gets_no_digest():
    stream = _HashingStream(io.BytesIO())
    stream.write(b"abc")
    assert stream.record() == FileRecord(3, xxhash.xxh3_128(b"abc").hexdigest(), "xxh3_128")
    stream.seek(0)
    stream.write(b"x")
    assert stream.record() is None


def test_non_byte_buffers_are_hashed_by_their_bytes():
    array = torch.arange(8, dtype=torch.int32).numpy()
    stream = _HashingStream(io.BytesIO())
    stream.write(memoryview(array))
    assert stream.size == 32
    assert stream.getvalue() == array.tobytes()
    assert stream.record().digest == xxhash.xxh3_128(array.tobytes()).hexdigest()


def test_checkpointer_reads_no_data_file_back_to_hash_it(tmp_path, monkeypatch):
    read_back = []
    real_hash_files = checkpointer_module.hash_files

    def recording_hash_files(root, names, workers=4):
        read_back.extend(names)
        return real_hash_files(root, names, workers)

    monkeypatch.setattr(checkpointer_module, "hash_files", recording_hash_files)
    step_dir = Checkpointer(tmp_path, strategy="none", io_threads=3).save(
        5, {"model": {"w": torch.randn(64, 64)}, "extra": {"step": 5}}, contents=("model", "extra")
    )
    manifest = read_manifest(step_dir / "manifest.json")
    data_files = [name for name in manifest.files if name.endswith(".distcp")]
    assert len(data_files) == 3
    assert not [name for name in read_back if name.endswith(".distcp")]
    for name in data_files:
        assert manifest.files[name] == _xxh3_record(step_dir / name)
