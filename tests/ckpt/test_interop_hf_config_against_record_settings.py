"""A --hf-config is held to every setting of a Megatron record, not only its layout numbers.

The derivation refuses a record whose model no family exported here computes (a sigmoid
router, windowed, partial, interleaved or L2-normalised attention, 1p norms, another
softmax scale), and derives norm_topk_prob from moe_router_pre_softmax and the activation
from swiglu. With --hf-config all of that was passed over: the export wrote the weights
under a model that computes something else (a Qwen3-MoE's logits off by 0.04), exit 0,
and validate said valid.
"""

from __future__ import annotations

import json

import pytest

from tests.support.hf_model_files import changed_config_dir
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import assert_exports_to_source, one_error_line, run_cli
from tests.support.megatron_checkpoints import megatron_args, megatron_run

DENSE_SETTINGS = {
    "window_size": ([16, 0], "window_size=a list"),
    "rotary_percent": (0.5, "rotary_percent=0.5"),
    "rotary_interleaved": (True, "rotary_interleaved=True"),
    "apply_layernorm_1p": (True, "apply_layernorm_1p=True"),
    "qk_l2_norm": (True, "qk_l2_norm=True"),
    "softmax_scale": (0.5, "softmax_scale=0.5"),
}


def _refused_either_way(run, given, named, tmp_path) -> None:
    """Refused derived and under --hf-config alike (exit 1, naming the setting and the
    record), validate --hf-config invalid; nothing written."""
    where = f"{run / 'iter_0000100'} [args]"
    out = tmp_path / "hf"
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", out)
    derived = one_error_line(err)
    assert code == 1 and f"{where}: {named} cannot be exported" in derived, err
    assert "--hf-config" not in derived, derived  # no config makes the weights compute it
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", out, "--hf-config", given)
    line = one_error_line(err)
    # the record the value came from first, then the config.json that cannot compute it
    assert code == 1 and line.startswith(f"error: {where}: {named} cannot be exported"), err
    assert line.endswith(f"(nor does --hf-config {given / 'config.json'})"), line
    assert not out.exists()
    code, stdout, err = run_cli("ckpt", "validate", run, "--hf-config", given)
    assert code == 1 and named in stdout and "cannot be exported" in stdout, stdout + err


@pytest.mark.parametrize("setting", list(DENSE_SETTINGS))
def test_a_dense_setting_no_family_computes_is_refused_under_hf_config(setting, tmp_path):
    """Was: exported with exit 0 under --hf-config; window_size's derived refusal said to
    pass --hf-config, though no config computes a Megatron window."""
    value, named = DENSE_SETTINGS[setting]
    model = tiny_causal_lm("llama")
    run = megatron_run(tmp_path, model, megatron_args(model, **{setting: value}))
    given = changed_config_dir(model, tmp_path / "given")
    _refused_either_way(run, given, named, tmp_path)


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"moe_router_score_function": "sigmoid"}, "moe_router_score_function='sigmoid'"),
        ({"moe_router_topk_scaling_factor": 2.5}, "moe_router_topk_scaling_factor=2.5"),
    ],
)
def test_a_router_no_family_computes_is_refused_under_hf_config(changes, named, tmp_path):
    model = tiny_causal_lm("qwen3_moe")
    run = megatron_run(tmp_path, model, megatron_args(model, **changes))
    given = changed_config_dir(model, tmp_path / "given")
    _refused_either_way(run, given, named, tmp_path)


@pytest.mark.parametrize("hf_config", [False, True], ids=["derived", "hf-config"])
def test_a_top_k_scaling_factor_of_one_scales_nothing_and_exports(hf_config, tmp_path):
    """moe_router_topk_scaling_factor=1.0 multiplies the routing weights by 1: refused as
    "not scaled" when the table held it to None."""
    model = tiny_causal_lm("qwen3_moe")
    run = megatron_run(tmp_path, model, megatron_args(model, moe_router_topk_scaling_factor=1.0))
    given = ("--hf-config", changed_config_dir(model, tmp_path / "given")) if hf_config else ()
    assert_exports_to_source(model, run, tmp_path / "hf", *given)


def test_mixtral_cannot_compute_pre_softmax_routing_under_hf_config(tmp_path):
    model = tiny_causal_lm("mixtral")
    run = megatron_run(tmp_path, model, megatron_args(model, moe_router_pre_softmax=True))
    given = changed_config_dir(model, tmp_path / "given")
    _refused_either_way(run, given, "moe_router_pre_softmax=True", tmp_path)


def test_norm_topk_prob_must_be_what_the_records_router_computes(tmp_path):
    """A Qwen3-MoE run routing pre-softmax (the top-k weights not renormalised) given a
    config with norm_topk_prob true was exported as a renormalising model."""
    model = tiny_causal_lm("qwen3_moe", norm_topk_prob=False)  # recorded as pre-softmax
    run = megatron_run(tmp_path, model, megatron_args(model))
    wrong = changed_config_dir(model, tmp_path / "wrong", norm_topk_prob=True)
    out = tmp_path / "hf"
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", out, "--hf-config", wrong)
    line = one_error_line(err)
    assert code == 2 and "norm_topk_prob=True (record: moe_router_pre_softmax True)" in line, err
    assert "would compute another model" in line and not out.exists(), line
    code, stdout, _ = run_cli("ckpt", "validate", run, "--hf-config", wrong)
    assert code == 1 and "norm_topk_prob=True" in stdout, stdout
    # the same config leaving norm_topk_prob to Qwen3-MoE's default (false) is the run's
    left_out = changed_config_dir(model, tmp_path / "left_out")
    data = json.loads((left_out / "config.json").read_text())
    del data["norm_topk_prob"]
    (left_out / "config.json").write_text(json.dumps(data))
    assert_exports_to_source(model, run, out, "--hf-config", left_out)


def test_a_swiglu_record_refuses_another_activation(tmp_path):
    model = tiny_causal_lm("qwen3")
    run = megatron_run(tmp_path, model, megatron_args(model))
    given = changed_config_dir(model, tmp_path / "given", hidden_act="gelu")
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf", "--hf-config", given)
    assert code == 2 and "hidden_act='gelu' (record: swiglu True)" in one_error_line(err), err


def test_a_left_out_qwen3_head_dim_is_qwen3s_default(tmp_path):
    """transformers' Qwen3Config defaults head_dim to 128, not hidden / heads: the refusal
    named head_dim=32 for a config that builds 128."""
    model = tiny_causal_lm("qwen3")  # head_dim 48
    run = megatron_run(tmp_path, model, megatron_args(model))
    given = changed_config_dir(model, tmp_path / "given")
    data = json.loads((given / "config.json").read_text())
    del data["head_dim"]
    (given / "config.json").write_text(json.dumps(data))
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf", "--hf-config", given)
    line = one_error_line(err)
    assert code == 2 and "head_dim=128 (record: 48)" in line and "split wrong" in line, err


def test_each_layout_number_says_its_own_reason(tmp_path):
    """A num_experts_per_tok that differs was explained as q/k/v rows or vocabulary."""
    model = tiny_causal_lm("qwen3_moe")
    run = megatron_run(tmp_path, model, megatron_args(model))
    given = changed_config_dir(model, tmp_path / "given", num_experts_per_tok=3)
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf", "--hf-config", given)
    line = one_error_line(err)
    assert code == 2 and "num_experts_per_tok=3 (record: 2)" in line, err
    assert "another number of experts" in line and "q/k/v" not in line, line
