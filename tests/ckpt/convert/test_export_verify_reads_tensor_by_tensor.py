"""export-hf --verify reads each written tensor into memory of its own, never the whole file.

--verify opened each written file with safetensors' `safe_open`, which maps the whole file:
the mapped pages count in the process's memory, so verifying a 3 GB export whose largest
tensor is 0.49 GiB peaked at 3.19 GiB. It now reads the file's header once and each tensor's
bytes with one positioned read (`SafetensorsSource`, as import-hf reads), so what it holds
of a file is a few tensors, whatever the file's size.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mfsdp_ckpt.convert.export_hf import export_hf
from mfsdp_ckpt.storage import safetensors_source
from tests.support.export import save_single_process_checkpoint, verify_export_dir

SHARD_BYTES = 60_000  # several files of the tiny model's fp32 weights
# ~200 MB of fp32 weights in 13 layers, none over 4 MiB (the MLP's 2048 x 512)
WIDE = dict(hidden_size=512, intermediate_size=2048, num_hidden_layers=13)


def _checkpoint(root: Path, **config) -> Path:
    from trainer.tiny import build_tiny_model_dir

    assets = build_tiny_model_dir(root / "assets")
    fields = {**json.loads((assets / "config.json").read_text()), **config}
    fields.pop("layer_types", None)  # one per layer: made again for the new count
    (assets / "config.json").write_text(json.dumps(fields))
    save_single_process_checkpoint(root / "run", assets, seed=3)
    return root / "run"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    return _checkpoint(tmp_path_factory.mktemp("verify_tiny"))


@pytest.fixture(scope="module")
def wide_export(tmp_path_factory):
    """(checkpoint, its fp32 export in one ~200 MB file)."""
    root = tmp_path_factory.mktemp("verify_wide")
    run = _checkpoint(root, **WIDE)
    export_hf(run, root / "hf", dtype="fp32")
    return run, root / "hf"


def _verify(run: Path, out: Path, progress=None) -> list[str]:
    """`verify_export` of `out` as export-hf --verify runs it, with `progress`."""
    from mfsdp_ckpt.convert.export_plan import plan_export
    from mfsdp_ckpt.convert.export_source import load_config, resolve_source
    from mfsdp_ckpt.convert.export_verify import verify_export

    plan = plan_export(resolve_source(str(run), "auto"), load_config(out / "config.json"))
    return verify_export(plan, out, progress=progress)


def _headers(out: Path) -> dict[str, list[tuple[int, int]]]:
    """Each written file's (tensor bytes, their begin in the file), read by hand."""
    found = {}
    for path in sorted(out.glob("*.safetensors")):
        with open(path, "rb") as handle:
            length = int.from_bytes(handle.read(8), "little")
            header = json.loads(handle.read(length))
        found[path.name] = [
            (end - begin, 8 + length + begin)
            for name, (begin, end) in (
                (n, e["data_offsets"]) for n, e in header.items() if n != "__metadata__"
            )
        ]
    return found


def _record_reads(monkeypatch, out: Path) -> list[tuple[str, int, int]]:
    """(file name, offset, bytes asked) of every positioned read of a file in `out` from
    now on; the reads themselves happen as before."""
    reads: list[tuple[str, int, int]] = []
    real = os.preadv
    inside = os.path.realpath(out)

    def recording(fd, buffers, offset, *args):
        path = os.readlink(f"/proc/self/fd/{fd}")
        if os.path.dirname(path) == inside:
            reads.append((os.path.basename(path), offset, sum(len(b) for b in buffers)))
        return real(fd, buffers, offset, *args)

    monkeypatch.setattr(os, "preadv", recording)
    return reads


def test_verify_reads_each_tensor_once_and_no_more_than_it(wide_export, monkeypatch):
    run, out = wide_export
    reads = _record_reads(monkeypatch, out)
    assert _verify(run, out) == []
    for file, tensors in _headers(out).items():
        largest = max(nbytes for nbytes, _ in tensors)
        read_here = [(offset, nbytes) for name, offset, nbytes in reads if name == file]
        assert read_here, f"{file} never read tensor by tensor"
        assert max(nbytes for _, nbytes in read_here) <= largest
        assert sorted(read_here) == sorted((begin, n) for n, begin in tensors if n)


def test_verify_never_maps_the_file_it_reads(wide_export):
    run, out = wide_export
    real_out = os.path.realpath(out)
    mapped: list[str] = []

    def look_at_maps(*_counts):
        with open("/proc/self/maps") as maps:
            mapped.extend(line.strip() for line in maps if real_out in line)

    assert _verify(run, out, progress=look_at_maps) == []
    assert mapped == []


def _peak_rss_bytes() -> int:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def test_verify_peak_memory_is_far_below_the_file_size(wide_export):
    """Coarse check of the above in memory itself: the peak resident memory while
    verifying a ~200 MB file grows by well under the file's size (was: by all of it)."""
    run, out = wide_export
    size = (out / "model.safetensors").stat().st_size
    assert size > 180 << 20
    with open("/proc/self/clear_refs", "w") as clear:  # the peak restarts from now
        clear.write("5")
    before = _peak_rss_bytes()
    assert _verify(run, out) == []
    assert _peak_rss_bytes() - before < size // 2


@pytest.mark.parametrize("shard_bytes", [5 * 10**9, SHARD_BYTES], ids=["one_file", "sharded"])
def test_verify_reads_each_file_header_once(tiny_run, tmp_path, monkeypatch, shard_bytes):
    """Parsing a file's header per tensor made --verify quadratic in a file's tensor count."""
    out = tmp_path / "hf"
    headers: list[str] = []
    real = safetensors_source.read_header

    def recording(path, *args, **kwargs):
        headers.append(Path(path).name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(safetensors_source, "read_header", recording)
    result = export_hf(tiny_run, out, dtype="fp32", max_shard_size=shard_bytes, verify=True)
    assert result.mismatches == []
    files = sorted(path.name for path in out.glob("*.safetensors"))
    assert sorted(headers) == files
    if shard_bytes == SHARD_BYTES:
        assert len(files) > 2


def test_verify_still_names_a_flipped_byte_and_a_cut_file(wide_export, tmp_path):
    import shutil

    run, out = wide_export
    copy = tmp_path / "hf"
    shutil.copytree(out, copy)
    nbytes, begin = _headers(copy)["model.safetensors"][-1]
    with open(copy / "model.safetensors", "r+b") as handle:
        handle.seek(begin + nbytes // 2)
        byte = handle.read(1)
        handle.seek(begin + nbytes // 2)
        handle.write(bytes([byte[0] ^ 0xFF]))
    problems = verify_export_dir(run, copy)
    assert len(problems) == 1 and "1 byte(s) differ" in problems[0], problems

    os.truncate(copy / "model.safetensors", begin)
    problems = verify_export_dir(run, copy)
    assert any(p.startswith("model.safetensors: unreadable (") for p in problems), problems
    assert not any(str(copy) in p for p in problems), problems  # the file as the export names it
