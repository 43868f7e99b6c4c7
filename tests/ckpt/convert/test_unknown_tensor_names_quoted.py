"""A tensor name that config.json has no place for is quoted where import-hf (a safetensors
name) or export-hf (a stored key) names it: an empty name ("e.g. " and nothing after) or a
blank one was invisible, and the user could not tell which tensor was meant. Control
characters stay escaped."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.support.hf_model_files import saved_hf_model
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import save_dcp

NAMES = {
    "empty": ("", "''"),
    "blank": ("  ", "'  '"),
    "control characters": ("model.x\n\x1b[31mEVIL", "'model.x\\n\\x1b[31mEVIL'"),
}


@pytest.mark.parametrize("case", list(NAMES))
def test_unknown_name_quoted(case, tmp_path):
    name, shown = NAMES[case]
    model = saved_hf_model(tmp_path, "qwen2", tied=False)
    weights = model / "model.safetensors"
    tensors = load_file(weights)
    save_file({**tensors, name: torch.zeros(0, dtype=torch.bfloat16)}, weights)
    code, _stdout, err = run_cli("ckpt", "import-hf", model, "--out", tmp_path / "out")
    assert code == 1, err
    lines = err.strip().splitlines()
    assert lines == [f"error: {model}: 1 tensor(s) unknown to qwen2, e.g. {shown}"], err
    assert "\x1b" not in err


def test_export_quotes_unknown_stored_names(tmp_path):
    """export-hf names the stored keys config.json has no place for the same way."""
    model = tiny_causal_lm("llama", vocab=64)
    state = {**model.state_dict(), "model.layers.0.extra. ": torch.zeros(2)}
    ckpt = save_dcp({"model": state}, tmp_path / "dist_ckpt")
    (tmp_path / "huggingface").mkdir()
    (tmp_path / "huggingface" / "config.json").write_text(json.dumps(model.config.to_dict()))
    code, _stdout, err = run_cli("ckpt", "export-hf", ckpt, "--out", tmp_path / "hf")
    assert code == 1, err  # the checkpoint's own config.json: a failed check, not bad usage
    said = "1 tensor(s) unknown to llama (hf layout), e.g. 'model.model.layers.0.extra. '"
    assert err.strip().splitlines() == [f"error: {ckpt}: {said}"]
