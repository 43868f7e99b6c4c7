"""validate's verdict on an intact checkpoint export-hf cannot convert is UNSUPPORTED, not
INVALID; damage in the same checkpoint still reads INVALID.

Was: a Megatron-LM run whose record states LayerNorm (a model no family exported here
computes) ended `INVALID: .../iter_0000100 (...)`, as a truncated shard does: a user
checking integrity read that and could delete a sound run. Exit 1 is kept (validate's
verdict includes "export-hf writes it"); the line and `--json`'s `verdict` say which.
UNSUPPORTED is one narrow class: export refusing a KIND of model or adapter it does not
convert, stated by a record otherwise sound (`RefusedKind`). Every other refusal is damage,
INVALID: was, a record with hidden_size=-1, 0 heads, heads not in their groups, no layer
count or 1025 layers over 2 stored read "UNSUPPORTED ... (intact; ...)" (DAMAGED_RECORDS),
and so did a LayerNorm record beside such damage. Every record refusal of the matrix is
walked by tests/ckpt/test_validate_agrees_with_export_on_records.py; adapters missing half
of a pair, of mixed ranks or of both kinds by tests/ckpt/test_interop_megatron_peft.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import remove_shard, run_cli, truncate_shard
from tests.support.megatron_checkpoints import (
    STEP,
    mcore_weights,
    megatron_args,
    megatron_run,
    save_dcp,
)

REFUSAL = "normalization='LayerNorm' cannot be exported (Llama, Qwen2 and Qwen3 use RMSNorm)"


def _layernorm_run(root: Path, **extra) -> Path:
    """A Megatron-LM run, intact, whose record states LayerNorm (export-hf refuses it)."""
    model = tiny_causal_lm("llama")
    args = megatron_args(model, normalization="LayerNorm", **extra)
    return megatron_run(root, model, args)


def _validate(run: Path, *flags) -> tuple[int, str, dict]:
    """(exit code, the text verdict line, the --json report)."""
    code, stdout, err = run_cli("ckpt", "validate", run, *flags)
    json_code, json_out, _ = run_cli("ckpt", "validate", run, "--json", *flags)
    assert json_code == code, (stdout, err, json_out)
    return code, stdout.splitlines()[-1], json.loads(json_out)


def test_an_intact_record_export_refuses_is_unsupported(tmp_path):
    run = _layernorm_run(tmp_path)
    code, verdict, report = _validate(run)
    step = run / "iter_0000100"
    assert code == 1, verdict
    assert verdict.startswith(
        f"UNSUPPORTED: {step} (intact; export-hf cannot convert it: {REFUSAL}) (megatron-lm,"
    ), verdict
    assert "INVALID" not in verdict, verdict
    assert report["verdict"] == "unsupported" and report["valid"] is False, report
    assert [f["message"] for f in report["findings"] if f["severity"] == "error"] == [REFUSAL]


def _nan_weight(root: Path) -> Path:
    """Intact but for one weight of NaNs, which --deep reads."""
    model = tiny_causal_lm("llama")
    name, weight = next(iter(mcore_weights(model).items()))
    args = megatron_args(model, normalization="LayerNorm")
    return megatron_run(root, model, args, extra={name: torch.full_like(weight, math.nan)})


DAMAGE = {
    "a truncated shard": (lambda root: _truncated(root, truncate_shard), ()),
    "a missing shard": (lambda root: _truncated(root, remove_shard), ()),
    "unreadable metadata": (
        lambda root: _truncated(root, lambda d: (d / ".metadata").write_bytes(b"not a pickle")),
        (),
    ),
    "NaN weights": (_nan_weight, ("--deep",)),
    # a value stated as no number: a damaged record (`record_values`), not export's rule
    "a damaged record value": (lambda root: _layernorm_run(root, norm_epsilon=math.nan), ()),
    # values the kind refusal used to hide: derived, they are damage first
    "a negative size": (lambda root: _layernorm_run(root, hidden_size=-1), ()),
    "heads not in their groups": (lambda root: _layernorm_run(root, num_query_groups=3), ()),
    "a layer more than stored": (lambda root: _layernorm_run(root, num_layers=3), ()),
    # sizes the tensors contradict (the tiny model: hidden 128, FFN 192, 4 heads in 2
    # groups): only the layer count was held to them on the refused path
    "another hidden size": (lambda root: _layernorm_run(root, hidden_size=256), ()),
    "another FFN size": (lambda root: _layernorm_run(root, ffn_hidden_size=96), ()),
    "more attention heads": (lambda root: _layernorm_run(root, num_attention_heads=8), ()),
    "more query groups": (lambda root: _layernorm_run(root, num_query_groups=4), ()),
    "a negative size under --hf-config": (
        lambda root: _layernorm_run(root, hidden_size=-1),
        ("--hf-config", "GIVEN"),
    ),
    "a damaged value under --hf-config": (
        lambda root: _layernorm_run(root, norm_epsilon=math.nan),
        ("--hf-config", "GIVEN"),
    ),
}


def _truncated(root: Path, damage) -> Path:
    run = _layernorm_run(root)
    damage(run / "iter_0000100")
    return run


@pytest.mark.parametrize("case", list(DAMAGE))
def test_damage_beside_a_refused_record_is_invalid(tmp_path, case):
    """Damage wins: the checkpoint is not intact, whatever export's rule says too."""
    make, flags = DAMAGE[case]
    run = make(tmp_path)
    given = _given_config(tmp_path)
    code, verdict, report = _validate(run, *(given if f == "GIVEN" else f for f in flags))
    assert code == 1 and verdict.startswith("INVALID: "), verdict
    assert report["verdict"] == "invalid" and report["valid"] is False, report


def _given_config(root: Path) -> Path:
    """A model dir of the run's own sizes, for --hf-config."""
    tiny_causal_lm("llama").config.save_pretrained(root / "given")
    return root / "given"


# Records export refuses as damage, no kind among them: each read "UNSUPPORTED (intact;
# export-hf cannot convert it: ...)", though export-hf even converts the first two with a
# --hf-config (the weights are intact, the record is not)
DAMAGED_RECORDS = {
    "a negative hidden size": {"hidden_size": -1},
    "no attention heads": {"num_attention_heads": 0},
    "heads not in their groups": {"num_query_groups": 3},
    "no layer count": {"num_layers": None},
    "layers past the bound, 2 stored": {"num_layers": 1025},
    "a size as text": {"num_layers": "2"},
    # settings held to one value, stated as no value of their kind: damage, not a kind
    "the MLP's flag as text": {"swiglu": "true"},
    "no normalization named": {"normalization": None},
}


@pytest.mark.parametrize("case", list(DAMAGED_RECORDS))
def test_a_damaged_record_is_invalid_not_unsupported(tmp_path, case):
    model = tiny_causal_lm("llama")
    run = megatron_run(tmp_path, model, megatron_args(model, **DAMAGED_RECORDS[case]))
    code, verdict, report = _validate(run)
    assert code == 1 and verdict.startswith("INVALID: "), verdict
    assert "intact" not in verdict and report["verdict"] == "invalid", report
    # a config of the user's own supplies what the record damages (export converts some
    # so): whatever the verdict, never "intact" export's rule
    code, verdict, report = _validate(run, "--hf-config", _given_config(tmp_path))
    assert not verdict.startswith("UNSUPPORTED") and report["verdict"] != "unsupported", verdict


def test_strict_without_a_manifest_stays_invalid(tmp_path):
    """--strict fails a checkpoint with no manifest (no hash checked): that verdict, as
    before, is INVALID; the refusal is still listed among the errors."""
    code, verdict, report = _validate(_layernorm_run(tmp_path), "--strict")
    assert code == 1 and verdict.startswith("INVALID: "), verdict
    assert report["verdict"] == "invalid", report
    assert REFUSAL in [f["message"] for f in report["findings"]], report


def test_a_sound_checkpoint_is_valid_in_json(tmp_path):
    model = tiny_causal_lm("llama")
    code, verdict, report = _validate(megatron_run(tmp_path, model, megatron_args(model)))
    assert code == 0 and verdict.startswith("valid: "), verdict
    assert report["verdict"] == "valid" and report["valid"] is True, report


def test_an_intact_ungated_mlp_record_stays_unsupported(tmp_path):
    """The sizes check passes over linear_fc1's rows, which a refused kind (an MLP
    without a gate) halves: an intact record of that kind is not damage."""
    model = tiny_causal_lm("llama")
    run = megatron_run(tmp_path, model, megatron_args(model, swiglu=False))
    code, verdict, report = _validate(run)
    assert code == 1 and verdict.startswith("UNSUPPORTED: "), verdict
    assert report["verdict"] == "unsupported", report


def _reshaped_run(root: Path, family: str, reshape, **settings) -> Path:
    """A Megatron-LM run, intact, of a kind that reshapes the family's tensors: the tiny
    model's weights as `reshape` ({key: tensor} -> {key: tensor}) makes them, its record
    stating `settings`."""
    model = tiny_causal_lm(family)
    weights = reshape(mcore_weights(model))
    state = {
        "args": megatron_args(model, **settings),
        "checkpoint_version": 3.0,
        "iteration": STEP,
        "model": weights,
    }
    run = root / "megatron"
    save_dcp(state, run / f"iter_{STEP:07d}")
    (run / "latest_checkpointed_iteration.txt").write_text(str(STEP))
    return run


# The tiny model: hidden 128, 4 heads of 32 in 2 groups, 2 layers
_HIDDEN, _HEADS, _HEAD_DIM = 128, 4, 32


def _mla(weights: dict) -> dict:
    """Multi-latent attention with a value head of 64 (DeepSeek-V3's heads x v_head_dim is
    not its hidden size): linear_qkv gives way to MLA's projections, linear_proj takes
    heads x 64 columns."""
    out = {}
    for key, tensor in weights.items():
        if key.endswith("linear_qkv.weight"):
            layer = key.removesuffix("linear_qkv.weight")
            out[layer + "linear_q_proj.weight"] = torch.randn(_HEADS * (32 + 16), _HIDDEN)
            out[layer + "linear_kv_down_proj.weight"] = torch.randn(64 + 16, _HIDDEN)
            out[layer + "linear_kv_up_proj.weight"] = torch.randn(_HEADS * (32 + 64), 64)
            out[layer + "linear_kv_up_proj.layer_norm_weight"] = torch.ones(64)
        elif key.endswith("linear_proj.weight"):
            out[key] = torch.randn(_HIDDEN, _HEADS * 64)
        else:
            out[key] = tensor
    return out


_MLA = {
    "multi_latent_attention": True,
    "v_head_dim": 64,
    "qk_head_dim": 32,
    "qk_pos_emb_head_dim": 16,
    "kv_lora_rank": 64,
    "q_lora_rank": None,
}


def _gated_qkv(weights: dict) -> dict:
    """Qwen3-Next's attention output gate: linear_qkv holds a gate row per query row."""
    return {
        key: torch.randn(t.shape[0] + _HEADS * _HEAD_DIM, t.shape[1])
        if key.endswith("linear_qkv.weight")
        else t
        for key, t in weights.items()
    }


def _latent_experts(weights: dict) -> dict:
    """Experts working in a latent space of 16 (moe_latent_size)."""

    def latent(key: str, t: torch.Tensor) -> torch.Tensor:
        if ".experts." in key and "linear_fc1" in key:
            return torch.randn(t.shape[0], 16)
        if ".experts." in key and "linear_fc2" in key:
            return torch.randn(16, t.shape[1])
        return t

    return {key: latent(key, t) for key, t in weights.items()}


# Kinds whose tensors the family's shapes do not describe: was, each intact record read
# INVALID ("the weights do not fit the record's sizes", at [args]), export-hf refusing
# only the kind
RESHAPING_KINDS = {
    "multi-latent attention": ("llama", _mla, _MLA),
    "an attention output gate": ("llama", _gated_qkv, {"attention_output_gate": True}),
    "latent experts": ("qwen3_moe", _latent_experts, {"moe_latent_size": 16}),
}


@pytest.mark.parametrize("case", list(RESHAPING_KINDS))
def test_an_intact_record_of_a_reshaping_kind_is_unsupported(tmp_path, case):
    family, reshape, settings = RESHAPING_KINDS[case]
    code, verdict, report = _validate(_reshaped_run(tmp_path, family, reshape, **settings))
    assert code == 1 and verdict.startswith("UNSUPPORTED: "), verdict
    assert report["verdict"] == "unsupported", report


def test_a_reshaping_kind_still_holds_the_hidden_size(tmp_path):
    """Only the sizes such a kind leaves alone are held, the hidden size among them: a
    record of another one is damage, said at the tensor it contradicts."""
    run = _reshaped_run(tmp_path, "llama", _mla, **_MLA, hidden_size=256)
    code, verdict, report = _validate(run)
    assert code == 1 and verdict.startswith("INVALID: "), verdict
    (found,) = [f for f in report["findings"] if "records:" in f["message"]]
    assert found["where"].startswith("[") and found["where"].endswith(".weight]"), found


def test_a_shape_kept_kind_names_the_tensor_its_record_contradicts(tmp_path):
    """A LayerNorm record of 8 heads over tensors of 4: the error is at an attention
    tensor, not at the record."""
    code, verdict, report = _validate(_layernorm_run(tmp_path, num_attention_heads=8))
    assert code == 1 and verdict.startswith("INVALID: "), verdict
    (found,) = [f for f in report["findings"] if "records:" in f["message"]]
    assert found["where"].startswith("[") and ".self_attention.linear_" in found["where"], found
