"""The data files' threads of import-hf's DCP writer: the manifest's xxh3_128 of every file
equals xxhash over the file as written (kernel copy, the buffered copy where the kernel
cannot, bytes in memory, torch.save'd blobs), and a failure inside a thread leaves nothing."""

import errno
import json
import os
import threading
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
import xxhash

from mfsdp_ckpt.check.removed_while_read import CheckpointRemovedError
from mfsdp_ckpt.convert.export_hf import export_hf
from mfsdp_ckpt.convert.import_hf import import_hf
from mfsdp_ckpt.format.dtypes import BY_NAME
from mfsdp_ckpt.storage import dcp_stream_writer
from mfsdp_ckpt.storage.dcp_stream_writer import SourceRange, StreamingDcpWriter
from tests.support.hf_model_files import (
    assert_same_tensors,
    hidden_leftovers,
    safetensors_tensors,
    saved_hf_model,
)


def _xxh3(path: Path) -> str:
    return xxhash.xxh3_128(path.read_bytes()).hexdigest()


def _writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("dcp-")]


def _assert_manifest_hashes_the_files(run: Path) -> None:
    step = run / "global_step_0"
    files = json.loads((step / "manifest.json").read_text())["files"]
    written = sorted(p.relative_to(step).as_posix() for p in step.rglob("*") if p.is_file())
    assert sorted(files) == [name for name in written if name != "manifest.json"]
    for name, record in files.items():
        assert record["size"] == (step / name).stat().st_size, name
        assert record == {"size": record["size"], "xxh3_128": _xxh3(step / name)}, name


@pytest.mark.parametrize("threads", [1, 3])
def test_manifest_xxh3_is_xxhash_over_each_written_file(tmp_path, monkeypatch, threads):
    monkeypatch.setattr(dcp_stream_writer, "WRITE_THREADS", threads)
    monkeypatch.setattr(dcp_stream_writer, "WRITEBACK_BYTES", 4096)  # many writeback hints
    source = saved_hf_model(tmp_path, "qwen2", tied=True)
    import_hf(source, tmp_path / "run", layout_name="hf")
    data_files = sorted((tmp_path / "run" / "global_step_0" / "dist_ckpt").glob("*.distcp"))
    assert len(data_files) == threads
    _assert_manifest_hashes_the_files(tmp_path / "run")
    export_hf(tmp_path / "run", tmp_path / "back")
    assert_same_tensors(safetensors_tensors(source), safetensors_tensors(tmp_path / "back"))


def test_hashes_hold_where_the_kernel_cannot_copy(tmp_path, monkeypatch):
    """A filesystem without copy_file_range: the bytes go through a buffer, hashed the same."""
    calls = []

    def no_kernel_copy(*args, **kwargs):
        calls.append(args)
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", no_kernel_copy)
    source = saved_hf_model(tmp_path, "llama", tied=False)
    import_hf(source, tmp_path / "run", layout_name="hf")
    assert calls  # the fallback was taken
    _assert_manifest_hashes_the_files(tmp_path / "run")
    export_hf(tmp_path / "run", tmp_path / "back")
    assert_same_tensors(safetensors_tensors(source), safetensors_tensors(tmp_path / "back"))


def test_every_payload_kind_hashed_and_loadable(tmp_path, monkeypatch):
    """Source ranges, bytes in memory, non-tensor values and torch.save'd (ZIP64) blobs, over
    two files: the records are xxhash's, and dcp.load reads every value back."""
    source_tensor = torch.arange(6 * 5, dtype=torch.float32).reshape(6, 5)
    raw = tmp_path / "raw.bin"
    raw.write_bytes(b"xyz" + source_tensor.numpy().tobytes())
    rows = source_tensor.numpy().tobytes()
    half = len(rows) // 2
    in_memory = torch.randn(7, 3).to(torch.bfloat16)
    large = torch.randn(40, 20)
    writer = StreamingDcpWriter(tmp_path / "ckpt", hash_data=True, threads=2)
    writer.add_raw(
        ("model", "ranges"),
        BY_NAME["float32"],
        (6, 5),
        [SourceRange(raw, 3 + half, len(rows) - half), SourceRange(raw, 3, half)],
    )
    writer.add_tensor(("model", "memory"), in_memory)
    writer.add_object(("iteration",), 12)
    monkeypatch.setattr(dcp_stream_writer, "MAX_BLOB_BYTES", 2048)
    writer.add_tensor(("model", "zip64"), large)
    records = writer.finish()
    assert sorted(records) == [".metadata", "__0_0.distcp", "__0_1.distcp"]
    for name, record in records.items():
        assert record.size == (tmp_path / "ckpt" / name).stat().st_size
        assert (record.algorithm, record.digest) == ("xxh3_128", _xxh3(tmp_path / "ckpt" / name))
    swapped = torch.cat(
        [source_tensor.reshape(-1)[half // 4 :], source_tensor.reshape(-1)[: half // 4]]
    )
    loaded = {
        "model": {
            "ranges": torch.zeros(6, 5),
            "memory": torch.zeros(7, 3, dtype=torch.bfloat16),
            "zip64": torch.zeros(40, 20),
        },
        "iteration": 0,
    }
    dcp.load(loaded, checkpoint_id=tmp_path / "ckpt")
    assert torch.equal(loaded["model"]["ranges"].reshape(-1), swapped)
    assert torch.equal(loaded["model"]["memory"], in_memory)
    assert torch.equal(loaded["model"]["zip64"], large)
    assert loaded["iteration"] == 12


def test_payload_of_the_wrong_size_is_refused(tmp_path):
    raw = tmp_path / "raw.bin"
    raw.write_bytes(bytes(64))
    writer = StreamingDcpWriter(tmp_path / "ckpt")
    with pytest.raises(ValueError, match="payload of 60 bytes, 64 expected"):
        writer.add_raw(("model", "w"), BY_NAME["float32"], (16,), [SourceRange(raw, 4, 60)])
    writer.abort()
    assert _writer_threads() == []


def test_a_failure_inside_a_file_thread_leaves_nothing(tmp_path, monkeypatch):
    """A source shorter than its header said (truncated after planning): the thread copying it
    fails naming the source, the error reaches the caller, every thread ends, and nothing is
    left at OUT."""
    from mfsdp_ckpt.convert import import_hf as import_module

    planned = import_module._payload_ranges

    def past_the_end(plan, item):
        ranges = planned(plan, item)
        if item.target.endswith("layers.1.mlp.down_proj.weight"):
            end = ranges[0].path.stat().st_size
            return [SourceRange(ranges[0].path, end - 8, ranges[0].length)]
        return ranges

    monkeypatch.setattr(import_module, "_payload_ranges", past_the_end)
    source = saved_hf_model(tmp_path, "qwen3", tied=False)
    with pytest.raises(CheckpointRemovedError, match="changed while it was read"):
        import_hf(source, tmp_path / "out", layout_name="hf")
    assert not (tmp_path / "out").exists() and hidden_leftovers(tmp_path) == []
    assert _writer_threads() == []


def test_progress_reports_every_tensor(tmp_path):
    source = saved_hf_model(tmp_path, "qwen2", tied=False)
    seen = []
    result = import_hf(
        source, tmp_path / "out", layout_name="mcore", progress=lambda *args: seen.append(args)
    )
    tensors, total, nbytes, total_bytes = seen[-1]
    assert tensors == total == result.tensors and nbytes == total_bytes == result.bytes
