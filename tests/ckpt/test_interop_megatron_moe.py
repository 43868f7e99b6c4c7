"""Mixture-of-experts checkpoints of Megatron-LM and Megatron-Bridge (fsdp_dtensor) export
to Hugging Face Qwen3-MoE, computing the source model's logits.

A tiny transformers Qwen3-MoE model (2 layers, 4 experts, top-2) is written under
Megatron-core names by tests/support/hf_to_mcore.py's independent converter, its experts
under global ids as TEGroupedMLP (`experts.linear_fc1.weight<E>_w`) or SequentialMLP
(`experts.local_experts.<E>.linear_fc1.weight_w`) hold them after fsdp_dtensor's SwiGLU
split; the export is loaded with the installed transformers and run. MoE settings export
does not reproduce are refused in one line naming the setting.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.check.report import STRICT_NEEDS_MANIFEST
from tests.support.export import load_report, logits_of
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import (
    STEP,
    bridge_run,
    megatron_args,
    megatron_run,
    save_dcp,
    source_logits,
)

EXPERT_LAYOUTS = ("grouped", "sequential")
# family: (a tensor of its hub names, its config.json's expert count key)
FAMILIES = {
    "qwen3_moe": ("model.layers.1.mlp.experts.3.up_proj.weight", "num_experts"),
    "qwen2_moe": ("model.layers.1.mlp.shared_expert_gate.weight", "num_experts"),
    "mixtral": ("model.layers.1.block_sparse_moe.experts.3.w3.weight", "num_local_experts"),
}


@functools.cache
def _tiny(family: str):
    return tiny_causal_lm(family)


@pytest.fixture(scope="module")
def moe_model():
    return _tiny("qwen3_moe")


def _safetensors_names(out: Path) -> set[str]:
    from safetensors import safe_open

    names: set[str] = set()
    for file in out.glob("*.safetensors"):
        with safe_open(str(file), "pt") as opened:
            names.update(opened.keys())
    return names


@pytest.mark.parametrize("experts", EXPERT_LAYOUTS)
@pytest.mark.parametrize("family", list(FAMILIES))
def test_megatron_lm_moe_exports_to_the_source_logits(family, experts, tmp_path):
    """Was: exit 1, "num_experts=4: a mixture-of-experts model has no ... equivalent"."""
    model = _tiny(family)
    run = megatron_run(tmp_path, model, megatron_args(model), experts=experts, optimizer=True)
    out = tmp_path / "hf"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out)
    assert code == 0, stdout + err
    config = json.loads((out / "config.json").read_text())
    hub_name, count_key = FAMILIES[family]
    assert config["architectures"] == [type(model).__name__], config
    assert (config[count_key], config["num_experts_per_tok"]) == (4, 2), config
    names = _safetensors_names(out)  # the hub's per-expert names, which every version loads
    assert hub_name in names, sorted(names)
    assert not any("gate_up_proj" in n or "router" in n for n in names), sorted(names)
    assert load_report(out) == {}
    ids, expected = source_logits(model)
    torch.testing.assert_close(logits_of(out, ids), expected, rtol=0, atol=1e-5)


def test_swapped_experts_change_the_logits(moe_model):
    """The logits comparison above can fail: routing reaches every expert of the fixed
    inputs, so an export that mixed up expert ids would not match."""
    import copy

    ids, expected = source_logits(moe_model)
    swapped = copy.deepcopy(moe_model)
    experts = swapped.model.layers[1].mlp.experts
    with torch.no_grad():
        for weight in (experts.gate_up_proj, experts.down_proj):
            weight[[0, 3]] = weight[[3, 0]].clone()
        assert (swapped(input_ids=ids).logits - expected).abs().max() > 1e-3


def test_bridge_moe_exports_streaming_in_shards_with_workers(moe_model, tmp_path):
    run = bridge_run(tmp_path, moe_model, steps=(10,), experts="sequential")
    out = tmp_path / "hf"
    code, stdout, err = run_cli(
        "ckpt", "export-hf", run, "--out", out, "--workers", "2", "--max-shard-size", "20KB"
    )
    assert code == 0, stdout + err
    assert "run_config.yaml model" in err and len(list(out.glob("*.safetensors"))) > 2, err
    assert load_report(out) == {}
    ids, expected = source_logits(moe_model)
    torch.testing.assert_close(logits_of(out, ids), expected, rtol=0, atol=1e-5)


def test_te_norm_names_and_fused_fc1_of_moe_layers_export(moe_model, tmp_path):
    """Transformer Engine spec: the input norm fused into linear_qkv, the MoE layer's own
    pre_mlp_layernorm; experts with an unsplit fc1 (`linear_fc1.weight<E>`)."""
    from tests.support.hf_to_mcore import to_mcore

    weights = to_mcore(moe_model, norms="te", fc1="fused", experts="grouped")
    assert "decoder.layers.0.mlp.experts.linear_fc1.weight2" in weights
    ckpt = save_dcp({"model": {f"module.{k}": v for k, v in weights.items()}}, tmp_path / "d")
    moe_model.config.save_pretrained(tmp_path / "assets")
    out = tmp_path / "hf"
    code, stdout, err = run_cli(
        "ckpt", "export-hf", ckpt, "--hf-config", tmp_path / "assets", "--out", out, "--verify"
    )
    assert code == 0 and "verified" in stdout + err, stdout + err
    ids, expected = source_logits(moe_model)
    torch.testing.assert_close(logits_of(out, ids), expected, rtol=0, atol=1e-5)


def test_validate_and_inspect_read_the_moe_checkpoint(moe_model, tmp_path):
    run = megatron_run(tmp_path, moe_model, megatron_args(moe_model), optimizer=True)
    code, stdout, err = run_cli("ckpt", "validate", run, "--deep", "--json")
    assert code == 0 and json.loads(stdout)["findings"] == [], stdout + err
    code, stdout, err = run_cli("ckpt", "validate", run, "--deep", "--strict", "--json")
    report = json.loads(stdout)  # strict fails for the manifest Megatron never writes, only
    messages = [finding["message"] for finding in report["findings"]]
    assert code == 1 and not report["has_manifest"], stdout
    assert messages == [STRICT_NEEDS_MANIFEST], stdout
    assert report["has_optimizer_state"] and report["deep"], stdout
    code, stdout, err = run_cli("ckpt", "inspect", run, "--json")
    described = json.loads(stdout)
    assert code == 0 and described["recorded_model"]["config"]["model_type"] == "qwen3_moe"
    code, stdout, err = run_cli("ckpt", "inspect", run)
    model_line = next(line for line in stdout.splitlines() if line.startswith("model "))
    assert code == 0 and "Qwen3MoeForCausalLM, 2 layers, hidden 32, 4 experts (top-2)" in (
        model_line
    ), stdout
    assert "model.module.decoder.layers.1.mlp.experts.linear_fc1.weight3_v" in stdout


def test_validate_names_an_expert_the_config_has_no_place_for(moe_model, tmp_path):
    run = megatron_run(tmp_path, moe_model, megatron_args(moe_model, num_experts=3))
    code, stdout, err = run_cli("ckpt", "validate", run, "--json")
    messages = [f["message"] for f in json.loads(stdout)["findings"]]
    assert code == 1 and any("linear_fc1.weight3_w" in m for m in messages), stdout + err


# Settings of an MoE model that change what it computes and that Qwen3-MoE does not have
REFUSED_SETTINGS = {
    "moe_router_score_function": "sigmoid",
    "moe_router_enable_expert_bias": True,
    "moe_router_num_groups": 2,
    "moe_router_group_topk": 1,
    "moe_router_topk_limited_devices": 2,
    "moe_router_force_biased": 0.1,
    "moe_apply_probs_on_input": True,
    "moe_latent_size": 16,
    "moe_mlp_glu_interleave_size": 8,
    "moe_router_topk_scaling_factor": 2.5,
    "moe_expert_capacity_factor": 1.0,
    "num_experts": 10**6,  # every expert's names would be generated
    "moe_layer_freq": [0, 1],
    "moe_router_load_balancing_type": "sinkhorn",
}


@pytest.mark.parametrize("setting", list(REFUSED_SETTINGS))
def test_moe_settings_export_does_not_reproduce_are_refused_naming_them(
    setting, moe_model, tmp_path
):
    value = REFUSED_SETTINGS[setting]
    run = megatron_run(tmp_path, moe_model, megatron_args(moe_model, **{setting: value}))
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    line = one_error_line(err)
    assert code == 1 and f"{setting}={value!r}" in line and "[args]" in line, stdout + err
    assert not (tmp_path / "hf").exists()


# (family, the setting changed, its value, words of the refusal): attention or shared
# experts that fit none of the MoE families
REFUSED_COMBINATIONS = {
    "qwen3_moe + shared expert": (
        "qwen3_moe",
        "moe_shared_expert_intermediate_size",
        48,
        "add_qkv_bias=False: Qwen2-MoE, the MoE family with a shared expert",
    ),
    "qwen2_moe shared expert ungated": (
        "qwen2_moe",
        "moe_shared_expert_gate",
        False,
        "moe_shared_expert_gate=False: Qwen2-MoE",
    ),
    "qkv bias without a shared expert": (
        "qwen2_moe",
        "moe_shared_expert_intermediate_size",
        None,
        "add_qkv_bias=True and no shared expert",
    ),
    "mixtral pre-softmax": (
        "mixtral",
        "moe_router_pre_softmax",
        True,
        "moe_router_pre_softmax=True cannot be exported as mixtral (Mixtral renormalises",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED_COMBINATIONS))
def test_moe_models_no_family_computes_are_refused_naming_the_setting(case, tmp_path):
    family, setting, value, words = REFUSED_COMBINATIONS[case]
    model = _tiny(family)
    run = megatron_run(tmp_path, model, megatron_args(model, **{setting: value}))
    code, _stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    line = one_error_line(err)
    assert code == 1 and words in line, err
    assert "num_experts=4 (mixture-of-experts)" in line or "as mixtral" in line, line
    assert not (tmp_path / "hf").exists()


BRIDGE_REFUSALS = {  # setting: (value, words of the refusal, as run_config.yaml names it)
    "moe_router_score_function": ("sigmoid", "model: moe_router_score_function='sigmoid'"),
    "moe_shared_expert_intermediate_size": (
        48,
        "model: num_moe_experts=4 (mixture-of-experts) with a shared expert",
    ),
}


@pytest.mark.parametrize("setting", list(BRIDGE_REFUSALS))
def test_bridge_moe_settings_are_refused_as_run_config_names_them(setting, tmp_path):
    import yaml

    value, words = BRIDGE_REFUSALS[setting]
    run = bridge_run(tmp_path, _tiny("qwen3_moe"), steps=(10,))
    run_config = run / "iter_0000010" / "run_config.yaml"
    data = yaml.safe_load(run_config.read_text())
    data["model"][setting] = value
    run_config.write_text(yaml.safe_dump(data))
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    line = one_error_line(err)
    assert code == 1 and f"run_config.yaml {words}" in line, stdout + err
    assert not (tmp_path / "hf").exists()


def _with_expert_bias(model: dict) -> str:
    model["module.decoder.layers.1.mlp.router.expert_bias"] = torch.zeros(4)
    return "moe_router_enable_expert_bias"


def _legacy_grouped(model: dict) -> str:
    model["module.decoder.layers.0.mlp.experts.weight1"] = torch.zeros(32, 4 * 48)
    return "moe_use_legacy_grouped_gemm"


def _shared_expert(model: dict) -> str:
    model["module.decoder.layers.0.mlp.shared_experts.linear_fc2.weight"] = torch.zeros(32, 8)
    return "shared experts (moe_shared_expert_intermediate_size), which qwen3_moe has none of"


@pytest.mark.parametrize("add", [_with_expert_bias, _legacy_grouped, _shared_expert])
def test_moe_tensors_no_rule_converts_are_refused_naming_the_setting(add, moe_model, tmp_path):
    """The weights decide under --hf-config too: a tensor of an MoE variant the table does
    not convert is exit 1 naming it and the setting that made it, not 'no mapping'."""
    run = megatron_run(tmp_path, moe_model, megatron_args(moe_model))
    dist = run / f"iter_{STEP:07d}"
    from tests.support.megatron_checkpoints import mcore_weights

    weights = mcore_weights(moe_model)
    words = add(weights)
    save_dcp({"model": weights}, tmp_path / "edited")
    moe_model.config.save_pretrained(tmp_path / "assets")
    code, stdout, err = run_cli(
        "ckpt",
        "export-hf",
        tmp_path / "edited",
        "--hf-config",
        tmp_path / "assets",
        "--out",
        tmp_path / "hf",
    )
    line = one_error_line(err)
    assert code == 1 and words in line, stdout + err
    assert dist.is_dir() and not (tmp_path / "hf").exists()


def test_moe_weights_under_a_dense_config_stay_refused_as_moe(moe_model, tmp_path):
    from tests.support.megatron_checkpoints import mcore_weights

    ckpt = save_dcp({"model": mcore_weights(moe_model)}, tmp_path / "d")
    dense = tiny_causal_lm("qwen3")
    dense.config.save_pretrained(tmp_path / "assets")
    code, _stdout, err = run_cli(
        "ckpt", "export-hf", ckpt, "--hf-config", tmp_path / "assets", "--out", tmp_path / "hf"
    )
    line = one_error_line(err)
    assert code == 1 and "mixture-of-experts (MoE) layers are not supported by a qwen3" in line


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_trainer_checkpoint_with_fused_experts_exports_per_expert(family, tmp_path):
    """transformers 5.x holds a layer's experts fused (`experts.gate_up_proj` [E, 2I, H])
    and Mixtral's block as `mlp`, so an HF-layout checkpoint stores them so; export writes
    the hub's per-expert tensors and validate checks them against the config as such."""
    moe_model = _tiny(family)
    state = {k: v.clone() for k, v in moe_model.state_dict().items()}
    assert "model.layers.0.mlp.experts.gate_up_proj" in state
    ckpt = save_dcp({"model": state}, tmp_path / "d")
    moe_model.config.save_pretrained(tmp_path / "assets")
    code, stdout, err = run_cli(
        "ckpt", "validate", ckpt, "--hf-config", tmp_path / "assets", "--json"
    )
    assert code == 0 and json.loads(stdout)["findings"] == [], stdout + err
    out = tmp_path / "hf"
    code, stdout, err = run_cli(
        "ckpt", "export-hf", ckpt, "--hf-config", tmp_path / "assets", "--out", out
    )
    assert code == 0, stdout + err
    names = _safetensors_names(out)
    assert FAMILIES[family][0] in names, sorted(names)
    assert not any("gate_up_proj" in n for n in names), sorted(names)
    assert load_report(out) == {}
    ids, expected = source_logits(moe_model)
    torch.testing.assert_close(logits_of(out, ids), expected, rtol=0, atol=1e-5)


def test_a_verl_moe_checkpoint_exports_with_its_huggingface_config(moe_model, tmp_path):
    """verl keeps the Hugging Face config beside the DCP (`actor/huggingface/`); one saved
    by transformers 5.x says `num_local_experts` where the hub's files say `num_experts`,
    and both are read."""
    from tests.support.megatron_checkpoints import adam_state, mcore_weights

    run = tmp_path / "verl"
    actor = run / "global_step_3" / "actor"
    weights = mcore_weights(moe_model, experts="sequential")
    save_dcp({"model": weights, "optimizer": adam_state(weights)}, actor / "dist_ckpt")
    moe_model.config.save_pretrained(actor / "huggingface")
    saved = json.loads((actor / "huggingface" / "config.json").read_text())
    assert "num_local_experts" in saved and "num_experts" not in saved, saved
    (actor / "transformer_config.json").write_text(json.dumps({"num_moe_experts": 4}))
    (run / "latest_checkpointed_iteration.txt").write_text("3")
    code, stdout, err = run_cli("ckpt", "validate", run, "--deep", "--json")
    assert code == 0 and json.loads(stdout)["findings"] == [], stdout + err
    out = tmp_path / "hf"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out, "--verify")
    assert code == 0, stdout + err
    ids, expected = source_logits(moe_model)
    torch.testing.assert_close(logits_of(out, ids), expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", ["qwen3_moe", "qwen2_moe"])
def test_dense_layers_of_an_moe_config_export_under_their_dense_names(family, tmp_path):
    """A config.json with `mlp_only_layers` (given with --hf-config): layer 0's dense MLP
    (`mlp.linear_fc1.weight_w`) exports as `mlp.gate_proj`, layer 1's experts as experts."""
    from tests.support.megatron_checkpoints import mcore_weights

    model = tiny_causal_lm(family, mlp_only_layers=[0])
    weights = mcore_weights(model)
    assert "module.decoder.layers.0.mlp.linear_fc1.weight_w" in weights
    ckpt = save_dcp({"model": weights}, tmp_path / "d")
    model.config.save_pretrained(tmp_path / "assets")
    out = tmp_path / "hf"
    code, stdout, err = run_cli(
        "ckpt", "export-hf", ckpt, "--hf-config", tmp_path / "assets", "--out", out
    )
    assert code == 0, stdout + err
    names = _safetensors_names(out)
    assert "model.layers.0.mlp.gate_proj.weight" in names
    assert "model.layers.1.mlp.experts.0.gate_proj.weight" in names
    assert load_report(out) == {}
    ids, expected = source_logits(model)
    torch.testing.assert_close(logits_of(out, ids), expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("key", ["num_experts", "num_local_experts"])
def test_a_config_claiming_a_billion_experts_is_refused_before_naming_them(
    key, moe_model, tmp_path
):
    """Each expert's names are generated (validate, export): a config.json claiming 10**9
    experts would have them generated for minutes; it is exit 2 naming the key."""
    from tests.support.megatron_checkpoints import mcore_weights

    ckpt = save_dcp({"model": mcore_weights(moe_model)}, tmp_path / "d")
    data = moe_model.config.to_dict()
    data.pop("num_local_experts", None)
    data[key] = 10**9
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "config.json").write_text(json.dumps(data))
    code, stdout, err = run_cli(
        "ckpt", "export-hf", ckpt, "--hf-config", tmp_path / "assets", "--out", tmp_path / "hf"
    )
    line = one_error_line(err)
    assert code == 2 and f"{key}=1000000000 is over the 16384 allowed" in line, stdout + err
    code, stdout, err = run_cli("ckpt", "validate", ckpt, "--hf-config", tmp_path / "assets")
    assert code == 1 and f"{key}=1000000000 is over" in stdout + err, stdout + err


def test_a_stored_fused_tensor_claiming_a_billion_experts_is_refused_naming_it(tmp_path):
    """An empty fused tensor ([10**9, 2I, 0]) holds no bytes to contradict its expert count,
    and each claimed expert would get its names generated: validate, inspect and export
    name the tensor in one line instead of running for minutes."""
    moe_model = _tiny("qwen3_moe")
    state = {k: v.clone() for k, v in moe_model.state_dict().items()}
    name = "model.layers.0.mlp.experts.gate_up_proj"
    state[name] = torch.empty(10**9, state[name].shape[1], 0)
    ckpt = save_dcp({"model": state}, tmp_path / "d")
    moe_model.config.save_pretrained(tmp_path / "assets")
    assets = tmp_path / "assets"
    export = ("ckpt", "export-hf", ckpt, "--hf-config", assets, "--out", tmp_path / "hf")
    for args, want in (
        (export, 1),
        (("ckpt", "validate", ckpt, "--hf-config", assets), 1),
        (("ckpt", "inspect", ckpt), 0),
    ):
        code, stdout, err = run_cli(*args)
        assert code == want, (args, stdout + err)
        if want:
            line = one_error_line(err) if not stdout.strip() else stdout
            assert "claims 1000000000 experts" in line and name in line, stdout + err
    assert not (tmp_path / "hf").exists()


def test_layers_times_experts_is_bounded_before_naming_them(moe_model, tmp_path):
    """1024 layers of 16384 experts pass each bound alone, and their names (some 50 million)
    took gigabytes and minutes before any weight was compared: their product is refused
    first, exit 2 naming both keys."""
    from tests.support.megatron_checkpoints import mcore_weights

    ckpt = save_dcp({"model": mcore_weights(moe_model)}, tmp_path / "d")
    data = moe_model.config.to_dict()
    data.pop("num_local_experts", None)
    data.update(num_hidden_layers=1024, num_experts=16384)
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "config.json").write_text(json.dumps(data))
    code, stdout, err = run_cli(
        "ckpt", "export-hf", ckpt, "--hf-config", tmp_path / "assets", "--out", tmp_path / "hf"
    )
    line = one_error_line(err)
    assert code == 2 and "num_hidden_layers=1024 x num_experts=16384" in line, stdout + err
    assert "over the 131072 allowed" in line, line
