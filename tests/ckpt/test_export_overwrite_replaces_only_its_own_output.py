"""`export-hf --overwrite` replaces an empty dir or an earlier export, recognised by the mark
an export writes in its safetensors headers, never a model dir it did not write.

It judged by files alone (config.json and model*.safetensors, nothing else), so the demo's
`init_model`, the very model the run trained from (its `model.path`), was replaced by an
export of that run without a word.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from mfsdp_ckpt.storage.safetensors_writer import carries_export_mark
from tests.support.interop_layouts import one_error_line, run_cli
from trainer.tiny import build_tiny_model_dir


def _digests(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): hashlib.md5(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def _export(ckpt: Path, out: Path, *more: str) -> tuple[int, str]:
    code, stdout, stderr = run_cli("ckpt", "export-hf", ckpt, "--out", out, *more)
    return code, stdout + stderr


@pytest.fixture
def demo(tmp_path) -> tuple[Path, Path]:
    """The demo's initial model (as `mfsdp demo` writes it) and a checkpoint of it."""
    init_model = build_tiny_model_dir(tmp_path / "init_model", with_weights=True)
    ckpt = tmp_path / "ckpt"
    code, _stdout, err = run_cli("ckpt", "import-hf", init_model, "--out", ckpt, "--layout", "hf")
    assert code == 0, err
    return init_model, ckpt


def test_a_model_dir_no_export_wrote_is_refused(demo):
    init_model, ckpt = demo
    before = _digests(init_model)
    code, said = _export(ckpt, init_model, "--overwrite")
    assert code == 2, said
    line = one_error_line(said)
    assert line.startswith(f"error: {init_model}: holds a Hugging Face model mfsdp export-hf")
    assert "model.safetensors carries no export mark" in line, line
    assert _digests(init_model) == before


@pytest.mark.parametrize("shards", [[], ["--max-shard-size", "100KB"]], ids=["one", "sharded"])
def test_an_earlier_export_is_replaced_again_and_again(tmp_path, demo, shards):
    _init_model, ckpt = demo
    out = tmp_path / "hf"
    assert _export(ckpt, out, *shards)[0] == 0
    weights = sorted(out.glob("*.safetensors"))
    assert weights and all(carries_export_mark(path) for path in weights)
    first = out.stat().st_ino
    for _ in range(2):
        code, said = _export(ckpt, out, "--overwrite", *shards)
        assert code == 0, said
        assert out.stat().st_ino != first  # a new directory, published in its place
        first = out.stat().st_ino


def test_an_empty_dir_is_replaced(tmp_path, demo):
    _init_model, ckpt = demo
    out = tmp_path / "empty"
    out.mkdir()
    code, said = _export(ckpt, out, "--overwrite")
    assert code == 0, said
    assert (out / "model.safetensors").is_file()
