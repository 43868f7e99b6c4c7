"""export-hf --verify opens each written safetensors file once.

Opening a safetensors file parses its whole header. --verify opened the file again for
every tensor it compared, so its time grew with the square of a file's tensor count
(18.9k tensors: 517 s against 33 s for the export itself). Now each file is opened once,
one at a time, its tensors compared while it is open.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mfsdp_ckpt.convert.export_hf import export_hf
from tests.support.export import save_single_process_checkpoint, verify_export_dir

SHARD_BYTES = 60_000  # several files of the tiny model's fp32 weights


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from trainer.tiny import build_tiny_model_dir

    root = tmp_path_factory.mktemp("verify_opens")
    save_single_process_checkpoint(root / "run", build_tiny_model_dir(root / "assets"), seed=3)
    return root / "run"


def _count_opens(monkeypatch) -> list[str]:
    """The file names safetensors' `safe_open` is called with from now on."""
    import safetensors

    opened: list[str] = []
    real = safetensors.safe_open

    def counting(path, *args, **kwargs):
        opened.append(Path(path).name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(safetensors, "safe_open", counting)
    return opened


def _files(out: Path) -> list[str]:
    return sorted(path.name for path in out.glob("*.safetensors"))


def _tensor_count(out: Path) -> int:
    index = out / "model.safetensors.index.json"
    if index.is_file():
        return len(json.loads(index.read_text())["weight_map"])
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), framework="pt") as handle:
        return len(list(handle.keys()))


@pytest.mark.parametrize("shard_bytes", [5 * 10**9, SHARD_BYTES], ids=["one_file", "sharded"])
def test_export_with_verify_opens_each_file_once(run_dir, tmp_path, monkeypatch, shard_bytes):
    out = tmp_path / "hf"
    opened = _count_opens(monkeypatch)
    result = export_hf(run_dir, out, dtype="fp32", max_shard_size=shard_bytes, verify=True)
    assert result.mismatches == []
    files = _files(out)
    assert sorted(opened) == files, opened  # once each (was: once per tensor)
    assert _tensor_count(out) > len(files)
    if shard_bytes == SHARD_BYTES:
        assert len(files) > 2


def test_verify_of_a_sharded_export_still_names_each_changed_tensor(run_dir, tmp_path):
    out = tmp_path / "hf"
    export_hf(run_dir, out, dtype="fp32", max_shard_size=SHARD_BYTES)
    weight_map = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    last = sorted(set(weight_map.values()))[-1]
    changed = sorted(name for name, file in weight_map.items() if file == last)[0]
    data = (out / last).read_bytes()
    header_len = int.from_bytes(data[:8], "little")
    begin = json.loads(data[8 : 8 + header_len])[changed]["data_offsets"][0] + 8 + header_len
    with open(out / last, "r+b") as handle:
        handle.seek(begin)
        handle.write(b"\x01\x02\x03\x04")
    problems = verify_export_dir(run_dir, out)
    assert len(problems) == 1 and problems[0].startswith(f"{changed}: "), problems
    assert f"in {last}" in problems[0]

    first = sorted(set(weight_map.values()))[0]
    (out / first).unlink()
    problems = verify_export_dir(run_dir, out)
    unreadable = [p for p in problems if f"unreadable in {first}" in p]
    assert len(unreadable) == sum(1 for file in weight_map.values() if file == first), problems
