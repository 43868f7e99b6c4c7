"""LoRA adapts the decoder's linear layers only, and says so before training: every other
module PEFT can adapt (an embedding, Conv1D, a convolution, MultiheadAttention) or refuses
(a decoder layer, a norm, the model itself) is refused in one line naming the key, the module
and its type, however the targets are spelled (a list, a regex, all-linear, an adapter dir's
adapter_config.json). An embed_tokens target beside q_proj was dropped without a word, and
alone it left nothing to train; a regex matching the model itself blamed an empty string."""

from __future__ import annotations

import pytest
import torch

from tests.trainer.test_lora_adapter_dir import CONFIG, _build, _edited, adapter  # noqa: F401
from trainer.config import ConfigError, ModelConfig
from trainer.lora import apply_lora
from trainer.lora_targets import ACCEPTED


def _refusal(cfg: ModelConfig, build=_build) -> str:
    with pytest.raises(ConfigError) as caught:
        build(cfg)
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    "targets",
    [
        ["embed_tokens"],
        ["q_proj", "embed_tokens"],
        r"model\.embed_tokens",
        r".*(embed_tokens|q_proj)",
    ],
    ids=["alone", "beside-q_proj", "regex", "regex-beside-q_proj"],
)
def test_an_embedding_target_is_refused_however_spelled(targets):
    message = _refusal(ModelConfig(lora_rank=2, target_modules=targets))
    assert message == (
        f"model.target_modules: model.embed_tokens (Embedding) is not a linear layer; {ACCEPTED}"
    )


def test_an_embedding_in_an_adapter_dir_is_refused_naming_its_file(adapter, tmp_path):  # noqa: F811
    edited = _edited(adapter, tmp_path, target_modules=["q_proj", "embed_tokens"])
    message = _refusal(ModelConfig(lora_adapter_path=str(edited)))
    assert message == (
        f"model.lora_adapter_path: {edited / CONFIG}: target_modules: model.embed_tokens"
        f" (Embedding) is not a linear layer; {ACCEPTED}"
    )


@pytest.mark.parametrize(
    ("targets", "says"),
    [
        (
            ["mlp"],
            "model.layers.0.mlp (Qwen2MLP) is not a linear layer"
            " (1 more module it targets refused too);",
        ),
        (["self_attn"], "model.layers.0.self_attn (Qwen2Attention) is not a linear layer"),
        (r".*_layernorm", "model.layers.0.input_layernorm (Qwen2RMSNorm) is not a linear layer"),
        (["norm"], "model.norm (Qwen2RMSNorm) is not a linear layer"),
        (["lm_head"], "lm_head cannot take a LoRA adapter here (the loss reads its weight"),
    ],
    ids=["decoder-mlp", "attention-block", "norm-regex", "final-norm", "lm_head"],
)
def test_a_module_that_is_not_a_decoder_linear_is_one_line_naming_it(targets, says):
    message = _refusal(ModelConfig(lora_rank=2, target_modules=targets))
    assert message.startswith(f"model.target_modules: {says}")
    assert message.endswith(ACCEPTED)


@pytest.mark.parametrize("regex", [".*", r"(|model\.layers\.0\.self_attn\.q_proj)"])
def test_a_regex_matching_the_root_names_the_model_itself(regex):
    message = _refusal(ModelConfig(lora_rank=2, target_modules=regex))
    assert message.startswith(
        "model.target_modules: the model itself (Qwen2ForCausalLM) is not a linear layer"
    )


def test_a_misspelt_name_beside_a_real_one_is_refused():
    message = _refusal(ModelConfig(lora_rank=2, target_modules=["q_proj", "q_porj"]))
    assert message.startswith("model.target_modules: 'q_porj' names no module of the model")


def test_targets_all_excluded_are_refused(adapter, tmp_path):  # noqa: F811
    edited = _edited(adapter, tmp_path, target_modules=["q_proj"], exclude_modules=["q_proj"])
    message = _refusal(ModelConfig(lora_adapter_path=str(edited)))
    assert message.startswith(
        f"model.lora_adapter_path: {edited / CONFIG}: target_modules: no module is left to adapt"
    )


class _Mixed(torch.nn.Module):
    """Modules PEFT adapts that are not nn.Linear, beside one that is."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(8, 2)
        self.conv = torch.nn.Conv1d(8, 8, 1)
        self.proj = torch.nn.Linear(8, 8)


@pytest.mark.parametrize(
    ("targets", "says"), [(["attn"], "attn (MultiheadAttention)"), (["conv"], "conv (Conv1d)")]
)
def test_other_modules_peft_adapts_are_refused(targets, says):
    def build(cfg: ModelConfig) -> None:
        apply_lora(_Mixed(), cfg, seed=0)

    message = _refusal(ModelConfig(lora_rank=2, target_modules=targets), build)
    assert message == f"model.target_modules: {says} is not a linear layer; {ACCEPTED}"


@pytest.mark.parametrize("targets", ["all-linear", ["c_attn"]])
def test_transformers_conv1d_is_refused_also_under_all_linear(targets):
    """GPT-2's Conv1D is what PEFT's all-linear picks there: its weight is stored
    transposed, which the merged export and the weight push do not expect."""
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=16))

    def build(cfg: ModelConfig) -> None:
        apply_lora(model, cfg, seed=0)

    message = _refusal(ModelConfig(lora_rank=2, target_modules=targets), build)
    assert message.startswith(
        "model.target_modules: transformer.h.0.attn.c_attn (Conv1D) is not a linear layer"
    )
    assert not any(".lora_" in name for name, _ in model.named_parameters())  # none injected


@pytest.mark.parametrize("spelled", ["all-linear", "ALL-LINEAR", "All-Linear"])
def test_all_linear_adapts_every_decoder_linear_and_trains_them(spelled):
    """In any case, as PEFT reads it (`ALL-LINEAR` was taken for a regex matching nothing)."""
    model = _build(ModelConfig(lora_rank=2, target_modules=spelled))
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    linear = {
        name
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear) and ".lora_" not in name and name != "lm_head"
    }
    adapted = {name.split(".lora_")[0].removesuffix(".base_layer") for name in trainable}
    assert adapted == {name.removesuffix(".base_layer") for name in linear}
