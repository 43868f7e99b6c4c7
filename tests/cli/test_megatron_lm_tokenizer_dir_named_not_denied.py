"""A Megatron-LM checkpoint with a tokenizer dir copied into `iter_N/tokenizer/` (where
Megatron-Bridge keeps its own) is not read for a tokenizer, and the messages say so. Was:
`mfsdp train` said "holds no tokenizer (Megatron-LM keeps none in its checkpoint)" and
export-hf "the checkpoint holds no tokenizer files" with the dir right there. Now both
name the dir as not read for this layout, and train says to set model.tokenizer to it; the
refusal stays (exit 2, one line)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import app
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import megatron_args, megatron_run, word_level_tokenizer
from tests.support.paths import REPO

STEP_DIR = "iter_0000100"


@pytest.fixture(scope="module")
def megatron_lm(tmp_path_factory) -> tuple[Path, Path]:
    """(a Megatron-LM run dir whose iteration dir holds a tokenizer/ a user copied there,
    that dir)."""
    root = tmp_path_factory.mktemp("megatron_lm")
    model = tiny_causal_lm("qwen3")
    run = megatron_run(root, model, megatron_args(model))
    tokenizer = run / STEP_DIR / "tokenizer"
    word_level_tokenizer(tokenizer, model.config.vocab_size)
    return run, tokenizer


@pytest.mark.parametrize("command", ["sft", "grpo"])
def test_train_names_the_dir_to_give_as_model_tokenizer(megatron_lm, tmp_path, command):
    run, tokenizer = megatron_lm
    result = CliRunner().invoke(
        app,
        [
            *("train", command, "--config", str(REPO / "examples" / f"{command}_gsm8k_qwen.yaml")),
            *(f"model.path={run}", f"trainer.run_dir={tmp_path / 'run'}"),
        ],
    )
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"error: model.path: {run}: {tokenizer} is not read for a"), line
    assert "megatron-lm checkpoint" in line and "holds no tokenizer" not in line, line
    assert line.endswith(f"set model.tokenizer={tokenizer} to use it"), line


def test_export_notes_the_dir_is_not_read(megatron_lm, tmp_path):
    run, tokenizer = megatron_lm
    out = tmp_path / "hf"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out)
    assert code == 0, stdout + err
    [note] = [line for line in err.splitlines() if "no tokenizer written" in line]
    assert f"{tokenizer} is not read for a megatron-lm checkpoint" in note, note
    assert "holds no tokenizer" not in note and f"copy its files into {out}" in note, note
    assert not any(path.name.startswith("tokenizer") for path in out.iterdir())


def test_without_a_tokenizer_dir_the_checkpoint_still_holds_none(tmp_path):
    model = tiny_causal_lm("qwen3")
    run = megatron_run(tmp_path, model, megatron_args(model))
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    assert code == 0, stdout + err
    assert "the checkpoint holds no tokenizer files" in err, err
