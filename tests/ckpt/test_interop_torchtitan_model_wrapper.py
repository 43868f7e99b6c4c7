"""torchtitan's early steps nest the model under `model.`: named, with its converter.

Early torchtitan saved `dcp.save({"model": ModelWrapper(model), "optimizer": ...})`, so its
own names sit under `model.` (`model.tok_embeddings.weight`, `optimizer.state.
tok_embeddings.weight.exp_avg`). Any key under `model.` made a DCP read as ours: validate
called such a step valid (with two warnings contradicting each other), export-hf said
"tensor(s) unknown to llama", and its folders were "not a checkpoint". A Hugging Face
state dict under `model.` (ours, verl's) or at the top level reads as before.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from mfsdp_ckpt.format.torchtitan import CONVERT_SCRIPT, torchtitan_names
from tests.support.interop_layouts import one_error_line, run_cli

_DIM, _VOCAB = 8, 16


def _titan_model() -> dict[str, torch.Tensor]:
    """A one-layer llama3 model under torchtitan's module names."""
    names = {
        "tok_embeddings.weight": (_VOCAB, _DIM),
        "layers.0.attention.wq.weight": (_DIM, _DIM),
        "layers.0.attention.wk.weight": (_DIM, _DIM),
        "layers.0.attention.wv.weight": (_DIM, _DIM),
        "layers.0.attention.wo.weight": (_DIM, _DIM),
        "layers.0.feed_forward.w1.weight": (2 * _DIM, _DIM),
        "layers.0.feed_forward.w2.weight": (_DIM, 2 * _DIM),
        "layers.0.feed_forward.w3.weight": (2 * _DIM, _DIM),
        "layers.0.attention_norm.weight": (_DIM,),
        "layers.0.ffn_norm.weight": (_DIM,),
        "norm.weight": (_DIM,),
        "output.weight": (_VOCAB, _DIM),
    }
    return {name: torch.randn(shape) for name, shape in names.items()}


def _save(state: dict, target: Path) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        dcp.save(state, checkpoint_id=str(target), no_dist=True)
    return target


def _early_dump(root: Path, step: int = 5) -> Path:
    """An early torchtitan dump folder: `checkpoint/step-N/` holding the wrapped model."""
    model = _titan_model()
    optimizer = {
        "state": {name: {"exp_avg": torch.zeros_like(t)} for name, t in model.items()},
        "param_groups": [{"lr": 3e-4, "params": list(model)}],
    }
    dump = root / "outputs"
    state = {"model": model, "optimizer": optimizer, "train_state": {"step": step}}
    _save(state, dump / "checkpoint" / f"step-{step}")
    return dump


@pytest.mark.parametrize("level", ["step", "checkpoint", "dump"])
def test_an_early_torchtitan_step_is_named_with_its_converter(level, tmp_path):
    from trainer.tiny import build_tiny_model_dir

    dump = _early_dump(tmp_path)
    step = dump / "checkpoint" / "step-5"
    given = {"step": step, "checkpoint": dump / "checkpoint", "dump": dump}[level]
    config = build_tiny_model_dir(tmp_path / "model")
    for command in ("validate", "inspect", "export-hf"):
        args = ["--out", tmp_path / "hf", "--hf-config", config] if command == "export-hf" else []
        code, stdout, err = run_cli("ckpt", command, given, *args)
        line = one_error_line(err)
        assert code == 2 and f"{given}: a torchtitan checkpoint" in line, stdout + err
        assert f"dcp_to_torch {step} full.pt" in line, line  # flattened first: see
        assert f"python {CONVERT_SCRIPT} FLAT OUT" in line, line  # test_torchtitan_layout_*
        assert "valid:" not in stdout + err and "unknown to" not in line
    assert not (tmp_path / "hf").exists()


def test_hugging_face_names_under_model_are_not_torchtitans():
    """Decided by the names under the prefix, not by the prefix: ours and verl's
    (`model.model.`), a bare Hugging Face state dict (`model.layers.N.self_attn.`, its
    `model.norm.weight` a name torchtitan has too), Megatron-core's, and a base model whose
    family shares torchtitan's block names (`model.tok_embeddings.weight` beside a
    top-level `output.weight`) are not torchtitan's."""
    titan = list(_titan_model())
    assert torchtitan_names([f"model.{name}" for name in titan] + ["train_state.step"])
    assert torchtitan_names([*titan, "optimizer.state.norm.weight.exp_avg"])
    ours = ["model.model.embed_tokens.weight", "model.model.layers.0.self_attn.q_proj.weight"]
    bare_hf = [
        "model.embed_tokens.weight",
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.mlp.gate_proj.weight",
        "model.norm.weight",
        "lm_head.weight",
    ]
    mcore = ["model.module.decoder.layers.0.self_attention.linear_qkv.weight"]
    shared_blocks = [
        "model.tok_embeddings.weight",
        "model.layers.0.attention.wo.weight",
        "output.weight",
    ]
    for names in (ours, bare_hf, mcore, shared_blocks, ["model.tok_embeddings.weight", *ours]):
        assert not torchtitan_names(names), names


def test_a_hugging_face_state_dict_under_model_named_step_n_is_still_read(tmp_path):
    from safetensors.torch import load_file

    from trainer.tiny import build_tiny_model_dir

    model_dir = build_tiny_model_dir(tmp_path / "model", with_weights=True)
    step = _save({"model": load_file(model_dir / "model.safetensors")}, tmp_path / "step-3")
    code, stdout, err = run_cli("ckpt", "validate", step, "--hf-config", model_dir)
    assert code == 0 and "torchtitan" not in stdout + err, stdout + err
