"""Megatron-LM args and Megatron-Bridge run_config.yaml under TransformerConfig's names.

Since Megatron-LM generates its arguments from Megatron-core's TransformerConfig
(arguments.py, 639c08ab, 2026-01-30), its args record holds TransformerConfig's field
names (the flags keep their spelling): `norm_epsilon` is `layernorm_epsilon` and
`apply_layernorm_1p` is `layernorm_zero_centered_gamma` in a newer checkpoint's args, as
Bridge's run_config.yaml has always held them. TransformerConfig also carries settings
that change what a dense GPT computes without changing its weights' names or shapes (a
sliding window, another softmax, muP multipliers, ...): the derived config cannot express
them, so they are refused in one line naming the setting, never exported as a Llama/Qwen
model that computes something else. (Rotary scaling, which config.json states, is derived:
tests/ckpt/test_interop_megatron_rope_scaling_derived.py.)
"""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from tests.support.export import load_report, logits_of
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import assert_exports_to_source, one_error_line, run_cli
from tests.support.megatron_checkpoints import (
    bridge_run,
    megatron_args,
    megatron_run,
    source_logits,
)


def _newer_args(model, **changes):
    """Megatron-LM's Namespace as a checkpoint made since 639c08ab holds it."""
    args = megatron_args(model, **{"layernorm_zero_centered_gamma": False, **changes})
    args.layernorm_epsilon = args.norm_epsilon
    del args.norm_epsilon
    return args


def test_newer_args_export_with_their_norm_epsilon(tmp_path):
    """Was: rms_norm_eps 1e-05 (the old argument's default) for a model trained with 1e-06."""
    model = tiny_causal_lm("qwen2")
    assert model.config.rms_norm_eps == 1e-6
    run = megatron_run(tmp_path, model, _newer_args(model))
    out = tmp_path / "hf"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out)
    assert code == 0, stdout + err
    assert json.loads((out / "config.json").read_text())["rms_norm_eps"] == 1e-6
    assert load_report(out) == {}
    ids, expected = source_logits(model)
    torch.testing.assert_close(logits_of(out, ids), expected, rtol=0, atol=1e-6)


# setting -> a value a run sets (TransformerConfig field names; Megatron-LM args and Bridge)
CHANGES_THE_MODEL = {
    "layernorm_zero_centered_gamma": True,
    "window_size": (128, 0),
    "softmax_type": "off-by-one",
    "softmax_scale": 0.5,
    "qk_l2_norm": True,
    "attention_output_gate": True,
    "no_rope_freq": 4,
    "apply_residual_connection_post_layernorm": True,
    "glu_linear_offset": 1.0,
    "activation_func_clamp_value": 7.0,
    "use_mup": True,
    "experimental_attention_variant": "gated_delta_net",
    "linear_attention_freq": 4,
    "enable_mhc_connections": True,
}


@pytest.mark.parametrize("setting", list(CHANGES_THE_MODEL))
def test_newer_args_that_change_the_model_are_refused_naming_them(setting, tmp_path):
    """Was: exit 0, a Llama config that computes another function."""
    model = tiny_causal_lm("llama")
    args = _newer_args(model, **{setting: CHANGES_THE_MODEL[setting]})
    run = megatron_run(tmp_path, model, args)
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    line = one_error_line(err)
    assert code == 1 and f"[args]: {setting}=" in line and "cannot be exported" in line, err
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize("setting", ["layernorm_zero_centered_gamma", "window_size", "use_mup"])
def test_bridge_settings_that_change_the_model_are_refused_naming_them(setting, tmp_path):
    model = tiny_causal_lm("qwen2", vocab=500)
    run = bridge_run(tmp_path, model, steps=(10,), rows=512)
    run_config = run / "iter_0000010" / "run_config.yaml"
    data = yaml.safe_load(run_config.read_text())
    value = CHANGES_THE_MODEL[setting]
    data["model"][setting] = list(value) if isinstance(value, tuple) else value
    run_config.write_text(yaml.safe_dump(data))
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    line = one_error_line(err)
    assert code == 1 and f"run_config.yaml model: {setting}=" in line, stdout + err
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize("factor", [None, 1, 1.0])
def test_args_whose_interpolation_leaves_positions_export(factor, tmp_path):
    model = tiny_causal_lm("llama")
    run = megatron_run(
        tmp_path, model, megatron_args(model, rotary_seq_len_interpolation_factor=factor)
    )
    assert_exports_to_source(model, run, tmp_path / "hf")


def _bridge_run_with(tmp_path, model, settings: dict):
    run = bridge_run(tmp_path, model, steps=(10,), rows=512)
    run_config = run / "iter_0000010" / "run_config.yaml"
    data = yaml.safe_load(run_config.read_text())
    data["model"].update(settings)
    run_config.write_text(yaml.safe_dump(data))
    return run, run_config


def test_bridge_defaults_for_rope_scaling_export(tmp_path):
    """A provider records the scaling factor whether or not scaling is on."""
    model = tiny_causal_lm("llama", vocab=500)
    settings = {
        "rope_scaling": False,
        "rope_scaling_factor": 8.0,
        "seq_len_interpolation_factor": None,
    }
    run, _ = _bridge_run_with(tmp_path, model, settings)
    assert_exports_to_source(model, run, tmp_path / "hf")
