"""verl's transformer_config.json is the record of the model a verl Megatron run trained
(its TransformerConfig, `override_transformer_config` applied), and is held to the export as
Megatron-LM's args and Bridge's run_config.yaml are: a setting no family computes is refused,
and huggingface/config.json is compared on top-k renormalisation, rope base and norm epsilon,
in one line naming transformer_config.json and the key (validate: an error). What verl wrote
as an object's text ("torch.bfloat16", "<function silu at 0x..>", or the activation left
out, as current verl does) is read for what it says and never refuses a checkpoint.
"""

from __future__ import annotations

import pytest

from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import assert_exports_to_source, one_error_line, run_cli
from tests.support.megatron_checkpoints import GPT_BUILD_FIELDS, verl_bridge_run

RECORD = "transformer_config.json"

REFUSED = {  # case: (family, transformer_config.json fields, words of the refusal)
    "sigmoid router": (
        "qwen3_moe",
        {"moe_router_score_function": "sigmoid"},
        "moe_router_score_function='sigmoid' cannot be exported",
    ),
    "top-k scaling": (
        "qwen3_moe",
        {"moe_router_topk_scaling_factor": 2.5},
        "moe_router_topk_scaling_factor=2.5 cannot be exported",
    ),
    "group-limited routing": (
        "qwen3_moe",
        {"moe_router_num_groups": 2, "moe_router_group_topk": 1},
        "moe_router_num_groups=2 cannot be exported",
    ),
    "expert bias": (
        "qwen3_moe",
        {"moe_router_enable_expert_bias": True},
        "moe_router_enable_expert_bias=True cannot be exported",
    ),
    "windowed attention": ("qwen3", {"window_size": [16, 0]}, "window_size=a list"),
    "multi-latent attention": (
        "qwen3",
        {"multi_latent_attention": True},
        "multi_latent_attention=True cannot be exported",
    ),
    "another activation": (
        "qwen3",
        {"activation_func": "<function gelu at 0x7f3a2c1b5e40>"},
        "activation_func=False cannot be exported (their MLP is SwiGLU)",
    ),
    "pre-softmax under a renormalising config": (
        "qwen3_moe",
        {"moe_router_pre_softmax": True},
        "norm_topk_prob=True (record: moe_router_pre_softmax True)",
    ),
    "rope base": (
        "qwen3",
        {"rotary_base": 5000.0},
        "rope_theta=10000.0 (record: rotary_base 5000.0)",
    ),
    "norm epsilon": (
        "qwen3",
        {"layernorm_epsilon": 1e-3},
        "rms_norm_eps=1e-06 (record: layernorm_epsilon 0.001)",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_verl_record_the_export_would_not_compute_is_refused(case, tmp_path):
    """Was: validate `valid` and export-hf exit 0 with huggingface/config.json's model."""
    family, fields, words = REFUSED[case]
    model = tiny_causal_lm(family, **({"num_experts_per_tok": 1} if family == "mixtral" else {}))
    run = verl_bridge_run(tmp_path, model, **fields)
    out = tmp_path / "hf"
    code, _stdout, err = run_cli("ckpt", "export-hf", run, "--out", out)
    line = one_error_line(err)
    assert code == 1 and words in line and RECORD in line, err
    assert not out.exists()
    code, stdout, err = run_cli("ckpt", "validate", run)
    assert code == 1 and words in stdout and RECORD in stdout, stdout + err


def test_a_verl_mixtral_with_the_pre_softmax_its_converter_sets_exports(tmp_path):
    """verl's config converter sets moe_router_pre_softmax for every Mixtral
    (hf_to_mcore_config_mixtral), and its rollout ran the same weights as Hugging Face
    Mixtral: held to the family's own rule, every verl Mixtral run was refused."""
    model = tiny_causal_lm("mixtral", num_experts_per_tok=2)
    run = verl_bridge_run(tmp_path, model, moe_router_pre_softmax=True, moe_router_topk=2)
    code, _stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    assert code == 0, err
    code, stdout, err = run_cli("ckpt", "validate", run)
    assert code == 0 and "valid" in stdout, stdout + err


# How verl writes objects: dtypes and enums by str(), callables dropped (current verl) or by
# repr (earlier), and any other object's repr: none of them refuses the checkpoint.
AS_TEXT = {
    "repr of silu": {"activation_func": "<function silu at 0x7f3a2c1b5e40>"},
    "callables dropped": {"activation_func": None, "init_method": None},
    "dtypes and enums": {
        "params_dtype": "torch.bfloat16",
        "pipeline_dtype": "torch.bfloat16",
        "attention_backend": "AttnBackend.auto",
    },
    "an object's repr where a value is compared": {"window_size": "<object object at 0x7f3a>"},
}


@pytest.mark.parametrize("case", list(AS_TEXT))
@pytest.mark.parametrize("family", ["qwen3_moe", "qwen2"])
def test_what_verl_writes_as_text_exports_the_trained_model(family, case, tmp_path):
    model = tiny_causal_lm(family)
    run = verl_bridge_run(tmp_path, model, **AS_TEXT[case])
    code, stdout, err = run_cli("ckpt", "validate", run)
    assert code == 0 and "warning" not in stdout + err, stdout + err
    assert_exports_to_source(model, run, tmp_path / "hf")


def test_an_mbridge_transformer_config_is_compared_on_what_it_holds(tmp_path):
    """mbridge's TransformerConfig holds no GPT build field (vocab, tying, rotary) and verl
    drops its activation: the record derives no config, its routing and norm are compared,
    and huggingface/ fixes the head layout (no note that it went unchecked)."""
    model = tiny_causal_lm("qwen3_moe")
    removed = dict.fromkeys((*GPT_BUILD_FIELDS, "activation_func"))
    run = verl_bridge_run(tmp_path, model, **removed)
    code, stdout, err = run_cli("ckpt", "validate", run)
    assert code == 0 and "warning" not in stdout + err, stdout + err
    assert_exports_to_source(model, run, tmp_path / "hf")
    run = verl_bridge_run(
        tmp_path / "sigmoid", model, **removed, moe_router_score_function="sigmoid"
    )
    code, _stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "no")
    assert code == 1 and f"{RECORD}: moe_router_score_function='sigmoid'" in one_error_line(err)


def test_a_run_from_a_verl_step_whose_router_no_family_computes_is_refused(tmp_path):
    """model.path of such a step trained the huggingface/ model, another routing."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from trainer.config import ModelConfig
    from trainer.config_base import ConfigError
    from trainer.model_source import load_checkpoint_weights, resolve_model_source

    model = tiny_causal_lm("qwen3_moe")
    run = verl_bridge_run(tmp_path, model, moe_router_score_function="sigmoid")
    source = resolve_model_source(ModelConfig(path=str(run)))
    assert source is not None and source.assets is not None
    built = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(source.assets))
    with pytest.raises(ConfigError, match=f"{RECORD}: moe_router_score_function='sigmoid'"):
        load_checkpoint_weights(built, source)


@pytest.mark.parametrize(
    ("family", "fields"),
    [
        ("qwen2", {"qk_l2_norm": True}),
        ("qwen2", {"layernorm_zero_centered_gamma": True}),
        ("qwen3", {"multi_latent_attention": True}),
    ],
    ids=["qk_l2_norm", "zero-centred norm", "multi-latent attention"],
)
def test_config_check_refuses_a_verl_step_train_refuses_with_trains_line(family, fields, tmp_path):
    """Was: `mfsdp config check` ok (exit 0) for model.path of a dense verl step whose
    transformer_config.json holds a setting no family computes, which train then refused as
    it loaded the weights. Now both say one line, naming transformer_config.json (where the
    value came from) before the huggingface/ dir the model would have been built from."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from tests.support.megatron_checkpoints import word_level_tokenizer
    from trainer.config import ModelConfig
    from trainer.config_base import ConfigError
    from trainer.model_source import load_checkpoint_weights, resolve_model_source

    model = tiny_causal_lm(family)
    run = verl_bridge_run(tmp_path, model, **fields)
    hf = next(run.rglob("huggingface"))
    word_level_tokenizer(hf, model.config.vocab_size)
    chat = '[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]'
    (tmp_path / "train.jsonl").write_text(f'{{"messages": {chat}}}\n')  # a first row train takes
    source = resolve_model_source(ModelConfig(path=str(run)))
    assert source is not None and source.assets is not None
    built = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(source.assets))
    with pytest.raises(ConfigError) as refused:
        load_checkpoint_weights(built, source)
    trains = str(refused.value)
    setting = next(iter(fields))
    assert trains.startswith(f"model.path: {hf.parent / RECORD}: {setting}=True"), trains
    assert trains.endswith(f"(nor does model.path {hf})"), trains
    data = f"data.train_files=[{tmp_path / 'train.jsonl'}]"
    code, stdout, err = run_cli("config", "check", "sft", f"model.path={run}", data)
    assert code == 2 and one_error_line(err) == f"error: {trains}", stdout + err
    run = verl_bridge_run(tmp_path / "ok", model)  # the same step without it checks ok
    word_level_tokenizer(next(run.rglob("huggingface")), model.config.vocab_size)
    code, stdout, err = run_cli("config", "check", "sft", f"model.path={run}", data)
    assert code == 0 and stdout.startswith("ok:"), stdout + err
