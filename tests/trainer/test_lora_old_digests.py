"""A LoRA checkpoint saved before XXH3 records its base model's files with sha256: inspect,
validate and resume still check the base with sha256 (a changed base is caught as before),
and the next save records xxh3_128."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import xxhash
from click.testing import CliRunner

from cli.main import app
from mfsdp_ckpt.check.validate import validate_checkpoint
from mfsdp_ckpt.format.checkpoint_resolution import resolve_checkpoint
from tests.support.ckpt_edits import resealed
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.resume import ResumeMismatchError
from trainer.sft import run_sft

SETTINGS = ("model.lora_rank=4", "model.lora_alpha=8", "data.global_batch_size=4")


@pytest.fixture(scope="module")
def old_run(tmp_path_factory) -> Path:
    """One LoRA step whose manifest records the base as an older mfsdp did (sha256)."""
    from trainer.tiny import build_tiny_model_dir

    root = tmp_path_factory.mktemp("lora_old_digests")
    base = build_tiny_model_dir(root / "base", seed=0, with_weights=True)
    data = write_chat_jsonl(root / "train.jsonl", rows=8)
    run_sft(
        tiny_config(data, root / "run", f"model.path={base}", *SETTINGS, "trainer.total_steps=1")
    )
    manifest = resolve_checkpoint(root / "run").manifest
    recorded = json.loads(manifest.read_text())
    for name in recorded["base_model"]["files"]:
        raw = (base / name).read_bytes()
        recorded["base_model"]["files"][name] = {
            "size": len(raw),
            "sha256": hashlib.sha256(raw).hexdigest(),
        }
    manifest.write_text(json.dumps(resealed(recorded)))
    return root


def _inspect(path: Path, *flags: str) -> str:
    result = CliRunner().invoke(app, ["ckpt", "inspect", str(path), *flags])
    assert result.exit_code == 0, result.output
    return result.output


def _with_changed_base(old_run: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the run whose manifest names a copy of the base with one byte flipped."""
    run = shutil.copytree(old_run / "run", tmp_path / "run")
    base = shutil.copytree(old_run / "base", tmp_path / "base")
    weights = base / "model.safetensors"
    raw = bytearray(weights.read_bytes())
    raw[-1] ^= 0xFF  # same size, other bytes: only the digest tells
    weights.write_bytes(bytes(raw))
    manifest = resolve_checkpoint(run).manifest
    recorded = json.loads(manifest.read_text())
    recorded["base_model"]["path"] = str(base)
    manifest.write_text(json.dumps(resealed(recorded)))
    return run, weights


def test_inspect_and_validate_check_an_old_base_record_with_sha256(old_run, tmp_path):
    check = json.loads(_inspect(old_run / "run", "--json", "--deep"))["lora"]["base_check"]
    assert check == {"status": "ok", "hashes_checked": ["sha256"], "problems": []}
    assert "base check  sizes and sha256 match" in _inspect(old_run / "run", "--deep")
    assert validate_checkpoint(old_run / "run", deep=True).ok(strict=True)

    run, weights = _with_changed_base(old_run, tmp_path)
    report = validate_checkpoint(run, deep=True)
    errors = [(f.where, f.message) for f in report.findings if f.severity == "error"]
    assert errors == [(str(weights), "sha256 differs from the base the adapter was trained on")]


def test_resume_rehashes_the_base_with_sha256_and_saves_xxh3(old_run, tmp_path):
    run = shutil.copytree(old_run / "run", tmp_path / "run")
    data, base = old_run / "train.jsonl", f"model.path={old_run / 'base'}"
    result = run_sft(tiny_config(data, run, base, *SETTINGS, "trainer.total_steps=2"))
    assert result.resumed_from == 1 and result.final_step == 2
    saved = json.loads(resolve_checkpoint(run).manifest.read_text())["base_model"]["files"]
    raw = (old_run / "base" / "model.safetensors").read_bytes()
    assert saved == {
        "model.safetensors": {"size": len(raw), "xxh3_128": xxhash.xxh3_128(raw).hexdigest()}
    }


def test_resume_on_a_changed_base_is_refused_under_sha256(old_run, tmp_path):
    run, weights = _with_changed_base(old_run, tmp_path)
    data = old_run / "train.jsonl"
    with pytest.raises(
        ResumeMismatchError, match=r"in this run's base \S+, model\.safetensors has "
    ):
        run_sft(
            tiny_config(
                data, run, f"model.path={weights.parent}", *SETTINGS, "trainer.total_steps=2"
            )
        )
