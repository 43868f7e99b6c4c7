"""`mfsdp ckpt inspect` on a LoRA checkpoint: rank, alpha, target modules, the base model and
whether the base on disk is the recorded one (sizes; digests with --deep), as text and JSON."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import xxhash
from click.testing import CliRunner

from cli.main import app, main
from tests.support.ckpt_edits import resealed
from tests.support.sft import tiny_config, write_chat_jsonl
from tests.support.terminal import Terminal
from trainer.sft import run_sft

TARGETS = ["q_proj", "v_proj"]


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory) -> Path:
    from trainer.tiny import build_tiny_model_dir

    root = tmp_path_factory.mktemp("lora_inspect")
    base = build_tiny_model_dir(root / "base", seed=0, with_weights=True)
    data = write_chat_jsonl(root / "train.jsonl", rows=8)
    settings = (
        f"model.path={base}",
        "model.lora_rank=4",
        "model.lora_alpha=8",
        f"model.target_modules=[{','.join(TARGETS)}]",
        "trainer.total_steps=1",
        "data.global_batch_size=4",
    )
    run_sft(tiny_config(data, root / "run", *settings))
    return root


def _inspect(path: Path, *flags: str):
    result = CliRunner().invoke(app, ["ckpt", "inspect", str(path), *flags])
    assert result.exit_code == 0, result.output
    return result.output


def test_inspect_shows_the_lora_fields(lora_run):
    base = (lora_run / "base").resolve()
    lora = json.loads(_inspect(lora_run / "run", "--json"))["lora"]
    assert (lora["rank"], lora["alpha"], lora["scale"]) == (4, 8, 2.0)
    assert lora["target_modules"] == TARGETS
    weights = base / "model.safetensors"
    assert lora["base_model"] == {
        "path": str(base),
        "random_init": False,
        "seed": 0,
        "files": [
            {
                "name": "model.safetensors",
                "size": weights.stat().st_size,
                "xxh3_128": xxhash.xxh3_128(weights.read_bytes()).hexdigest(),
            }
        ],
    }
    assert lora["base_check"] == {"status": "ok", "hashes_checked": [], "problems": []}
    deep = json.loads(_inspect(lora_run / "run", "--json", "--deep"))["lora"]["base_check"]
    assert deep == {"status": "ok", "hashes_checked": ["xxh3_128"], "problems": []}

    text = _inspect(lora_run / "run")
    assert "lora        rank 4, alpha 8 (scale 2), targets q_proj, v_proj" in text
    assert f"base model  {base} (1 weight file)" in text
    assert "base check  sizes match (digests not checked: --deep)" in text
    assert "base check  sizes and xxh3_128 match" in _inspect(lora_run / "run", "--deep")


def test_inspect_reports_a_changed_or_missing_base(lora_run, tmp_path):
    base = lora_run / "base"
    moved = shutil.copytree(lora_run / "run", tmp_path / "run")
    changed = shutil.copytree(base, tmp_path / "base")
    manifest = moved / "global_step_1" / "manifest.json"
    data = json.loads(manifest.read_text())
    data["base_model"]["path"] = str(changed)
    manifest.write_text(json.dumps(resealed(data)))
    weights = changed / "model.safetensors"
    raw = bytearray(weights.read_bytes())
    raw[-1] ^= 0xFF  # same size, other bytes: only the digest tells
    weights.write_bytes(bytes(raw))

    assert json.loads(_inspect(moved, "--json"))["lora"]["base_check"]["status"] == "ok"
    deep = json.loads(_inspect(moved, "--json", "--deep"))["lora"]["base_check"]
    assert deep["status"] == "failed" and deep["hashes_checked"] == []
    assert deep["problems"] == [
        f"{weights}: xxh3_128 differs from the base the adapter was trained on"
    ]
    text = _inspect(moved, "--deep")
    assert "base check  FAILED" in text and "xxh3_128 differs" in text

    shutil.rmtree(changed)
    check = json.loads(_inspect(moved, "--json"))["lora"]["base_check"]
    assert check["status"] == "not_checked"
    assert check["problems"] == [f"base model dir {changed} is not present here; cannot check it"]


def test_inspect_of_a_full_checkpoint_has_no_lora_section(lora_run, tmp_path):
    run = tmp_path / "full"
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=8)
    run_sft(tiny_config(data, run, "trainer.total_steps=1", "data.global_batch_size=4"))
    assert json.loads(_inspect(run, "--json"))["lora"] is None
    assert "lora " not in _inspect(run)


@pytest.mark.parametrize(
    "flags, drawn",
    [(["--deep"], True), (["--deep", "--json"], True), ([], False)],
    ids=["deep", "deep-json", "sizes-only"],
)
def test_inspect_deep_shows_the_base_model_hashing_on_a_terminal(
    lora_run, monkeypatch, capsys, flags, drawn
):
    """--deep reads every byte of the base model (minutes for a 7B one): a bar in bytes on a
    terminal, as validate and export draw theirs, under --json too (on stderr); none without
    hashing."""
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    monkeypatch.setattr("sys.argv", ["mfsdp", "ckpt", "inspect", str(lora_run / "run"), *flags])
    main()
    capsys.readouterr()
    bars = [line for line in terminal.getvalue().split("\r") if "%|" in line]
    size = (lora_run / "base" / "model.safetensors").stat().st_size
    if drawn:
        assert bars and all(bar.startswith("inspect:") for bar in bars), bars
        assert f"/{size / 1e6:.2f}M [" in bars[0], (size, bars)  # of every byte of the base
    else:
        assert bars == []
