"""export-hf from a URL (tensorstore, which gives no file descriptor to copy from) streams a
tensor that keeps its name a bounded piece at a time, as from a local path.

It read every tensor whole into a `bytes` copy and decoded it through torch: the export of
a checkpoint peaked at about 3.5x its largest tensor (1.77 GiB for a 0.5 GiB embedding), a
7B fp32 export from gs:// at about 7 GB. Now the bytes of such a tensor pass through
per-thread buffers of a few store reads, and a tensor decoded whole is read into its own
memory a piece at a time, so the peak stays well under the tensor's size.

--verify from a URL then built each such source tensor whole to compare it: it now reads
and casts the same pieces the export streamed, beside the same piece of the written file,
still failing on any byte that differs.
"""

from __future__ import annotations

import ctypes
import gc
import json
from pathlib import Path

import pytest

from mfsdp_ckpt.convert import tied_head
from mfsdp_ckpt.convert.export_hf import export_hf
from mfsdp_ckpt.convert.export_verify import verify_export
from mfsdp_ckpt.storage import tensorstore_store
from mfsdp_ckpt.storage.byte_store import CheckpointFileError, LocalByteStore, read_into
from mfsdp_ckpt.storage.tensorstore_store import TensorstoreByteStore
from tests.support.export import save_single_process_checkpoint

# tied embedding of 131072 x 128 fp32: one 64 MiB tensor, many store reads
VOCAB = 131072
TENSOR_BYTES = VOCAB * 128 * 4
EMBEDDING = "model.embed_tokens.weight"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A run whose embedding is 64 MiB, exported once through its URL (tensorstore and
    torch loaded, so what is measured after is the export's own memory)."""
    from trainer.tiny import build_tiny_model_dir

    root = tmp_path_factory.mktemp("url_stream")
    assets = build_tiny_model_dir(root / "assets")
    fields = {**json.loads((assets / "config.json").read_text()), "vocab_size": VOCAB}
    (assets / "config.json").write_text(json.dumps(fields))
    save_single_process_checkpoint(root / "run", assets, seed=7)
    export_hf(f"file://{root / 'run'}", root / "warm", workers=1)
    return root / "run"


def _status_bytes(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"/proc/self/status has no {field}")


def _peak_rise(action) -> int:
    """How far this process's resident memory rose, at its highest, while `action()` ran:
    the kernel's high-water mark (VmHWM), reset through /proc/self/clear_refs first. Freed
    memory the allocator still holds is given back first, or reusing it would hide a rise."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")
    before = _status_bytes("VmRSS")
    action()
    return _status_bytes("VmHWM") - before


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_a_url_export_peaks_well_under_its_largest_tensor(run_dir, tmp_path, monkeypatch, dtype):
    # planning compares the tied head with the embedding in pieces of its own (16 MiB, two
    # at once, whatever the store): smaller here, so the peak measured is the I/O's
    monkeypatch.setattr(tied_head, "PIECE_BYTES", 1 << 20)
    out = tmp_path / "url"
    rise = _peak_rise(lambda: export_hf(f"file://{run_dir}", out, dtype=dtype, workers=1))
    local = export_hf(run_dir, tmp_path / "local", dtype=dtype)
    assert local.files == ["model.safetensors"]
    assert (out / "model.safetensors").read_bytes() == (
        tmp_path / "local" / "model.safetensors"
    ).read_bytes()
    # was 2x the tensor and more (its bytes, then the decoded tensor)
    assert rise < TENSOR_BYTES * 3 // 4, f"peak rose {rise >> 20} MiB"


def test_a_short_piece_names_the_file_and_its_range(run_dir, monkeypatch):
    """A range read a piece at a time that the file ends inside is the truncation error,
    naming the file and the bytes of the piece that came short (not a partly filled buffer)."""
    dist_ckpt = run_dir / "global_step_1" / "dist_ckpt"
    local, remote = LocalByteStore(dist_ckpt), TensorstoreByteStore(f"file://{dist_ckpt}")
    name = max(local.list_files(), key=lambda file: local.size(file) or 0)
    size = local.size(name)
    assert size is not None
    monkeypatch.setattr(tensorstore_store, "READ_PIECE_BYTES", 1 << 20)
    whole = bytearray(3 << 20)
    read_into(remote, name, 0, memoryview(whole))
    assert bytes(whole) == local.read_range(name, 0, 3 << 20)  # three pieces, in order
    start = size - (1 << 20) - 10  # the second piece runs 10 bytes past the end
    with pytest.raises(CheckpointFileError) as caught:
        read_into(remote, name, start, memoryview(bytearray(2 << 20)))
    said = str(caught.value)  # a short answer, or the driver's OUT_OF_RANGE: both name it
    assert said.startswith(f"file://{dist_ckpt}/{name}: "), said
    assert f"[{start + (1 << 20)}, {start + (2 << 20)})" in said, said


def _url_plan(run_dir: Path, out: Path):
    """The plan export-hf --verify compares `out` by, its source read through the URL."""
    from mfsdp_ckpt.convert.export_plan import plan_export
    from mfsdp_ckpt.convert.export_source import load_config, resolve_source

    return plan_export(
        resolve_source(f"file://{run_dir}", "auto"), load_config(out / "config.json")
    )


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_verify_from_a_url_peaks_well_under_its_largest_tensor(
    run_dir, tmp_path, monkeypatch, dtype
):
    """--verify from a URL built each source tensor whole to compare it (peak over the
    tensor's size, where the export beside it streamed in pieces); it now compares the
    same pieces the export streams."""
    monkeypatch.setattr(tied_head, "PIECE_BYTES", 1 << 20)
    out = tmp_path / "url"
    export_hf(f"file://{run_dir}", out, dtype=dtype, workers=1)
    plan = _url_plan(run_dir, out)
    found: list[str] = []
    rise = _peak_rise(lambda: found.extend(verify_export(plan, out, workers=1)))
    assert found == []
    # half the tensor: building it whole rose past all of it; the pieces and their
    # read-ahead rose about a quarter, at the edge of a quarter bound
    assert rise < TENSOR_BYTES // 2, f"peak rose {rise >> 20} MiB"


def test_verify_from_a_url_still_fails_on_one_differing_byte(run_dir, tmp_path):
    """Compared in pieces, one byte changed deep inside the large tensor still fails,
    naming it."""
    out = tmp_path / "url"
    export_hf(f"file://{run_dir}", out, workers=1)
    written = out / "model.safetensors"
    header = 8 + int.from_bytes(written.read_bytes()[:8], "little")
    begin, end = json.loads(written.read_bytes()[8:header])[EMBEDDING]["data_offsets"]
    assert end - begin == TENSOR_BYTES
    with open(written, "r+b") as handle:
        at = header + begin + TENSOR_BYTES * 5 // 8 + 3  # past the first pieces
        handle.seek(at)
        byte = handle.read(1)
        handle.seek(at)
        handle.write(bytes([byte[0] ^ 0x40]))
    found = verify_export(_url_plan(run_dir, out), out, workers=1)
    assert len(found) == 1 and found[0].startswith(f"{EMBEDDING}: 1 byte(s) differ"), found
