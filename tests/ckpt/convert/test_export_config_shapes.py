"""export-hf reads config.json of known families without transformers; the names and
shapes it derives must equal what a meta-device transformers model holds, for every
variant that changes the weight set (biases, tied embeddings, explicit head_dim)."""

from __future__ import annotations

import json

import pytest
from transformers import (
    LlamaConfig,
    MistralConfig,
    MixtralConfig,
    Qwen2Config,
    Qwen2MoeConfig,
    Qwen3Config,
    Qwen3MoeConfig,
)

from mfsdp_ckpt.convert.export_source import JsonConfig, expected_weights_of, load_config
from mfsdp_ckpt.convert.hf_config import expected_weights, load_hf_config

SMALL = dict(
    vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4
)

VARIANTS = {
    "qwen2 tied": Qwen2Config(**SMALL, num_key_value_heads=2, tie_word_embeddings=True),
    "qwen2 untied": Qwen2Config(**SMALL, num_key_value_heads=1, tie_word_embeddings=False),
    "qwen3 head_dim 16": Qwen3Config(
        **SMALL, num_key_value_heads=2, head_dim=16, tie_word_embeddings=True
    ),
    "qwen3 attention bias": Qwen3Config(
        **SMALL, num_key_value_heads=4, head_dim=8, attention_bias=True
    ),
    "llama gqa": LlamaConfig(**SMALL, num_key_value_heads=2),
    "llama all biases, head_dim 24": LlamaConfig(
        **SMALL,
        num_key_value_heads=4,
        head_dim=24,
        attention_bias=True,
        mlp_bias=True,
        tie_word_embeddings=True,
    ),
    "mistral gqa, head_dim null": MistralConfig(**SMALL, num_key_value_heads=2),
    "mistral head_dim 16, tied": MistralConfig(
        **SMALL, num_key_value_heads=1, head_dim=16, tie_word_embeddings=True
    ),
    # Mistral's model has no biases whatever the file says
    "mistral stray bias keys": MistralConfig(
        **SMALL, num_key_value_heads=4, attention_bias=True, mlp_bias=True
    ),
    # experts under the hub's per-expert names (transformers 5.x fuses them in memory)
    "qwen3_moe every layer": Qwen3MoeConfig(
        **SMALL, num_key_value_heads=2, head_dim=16, num_experts=4, moe_intermediate_size=24
    ),
    "qwen3_moe dense layer 0, head_dim null": Qwen3MoeConfig(
        **SMALL, num_key_value_heads=2, num_experts=3, moe_intermediate_size=8, mlp_only_layers=[0]
    ),
    "qwen3_moe every 2nd layer, tied, attention bias": Qwen3MoeConfig(
        **{**SMALL, "num_hidden_layers": 4},
        num_key_value_heads=4,
        num_experts=2,
        moe_intermediate_size=16,
        decoder_sparse_step=2,
        tie_word_embeddings=True,
        attention_bias=True,
    ),
    "qwen2_moe shared expert, dense layer 1": Qwen2MoeConfig(
        **SMALL,
        num_key_value_heads=2,
        num_experts=3,
        moe_intermediate_size=8,
        shared_expert_intermediate_size=12,
        mlp_only_layers=[1],
    ),
    "qwen2_moe no qkv bias, tied": Qwen2MoeConfig(
        **SMALL,
        num_key_value_heads=4,
        num_experts=2,
        moe_intermediate_size=8,
        shared_expert_intermediate_size=16,
        qkv_bias=False,
        tie_word_embeddings=True,
    ),
    "mixtral block_sparse_moe, head_dim 16": MixtralConfig(
        **SMALL, num_key_value_heads=2, head_dim=16, num_local_experts=3
    ),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_json_shapes_equal_meta_model(variant, tmp_path):
    VARIANTS[variant].save_pretrained(tmp_path)
    config = load_config(tmp_path / "config.json")
    assert isinstance(config, JsonConfig)  # the fast path was taken
    fast = expected_weights_of(config)
    meta = expected_weights(load_hf_config(tmp_path))
    assert fast.allowed == meta.allowed
    assert fast.required == meta.required
    assert fast.tie_word_embeddings == meta.tie_word_embeddings


def test_missing_number_or_unknown_family_goes_through_transformers(tmp_path):
    VARIANTS["qwen3 head_dim 16"].save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    del data["head_dim"]  # qwen3's default head_dim is not hidden / heads: never guess it
    (tmp_path / "config.json").write_text(json.dumps(data))
    config = load_config(tmp_path / "config.json")
    assert not isinstance(config, JsonConfig) and config.head_dim == 128
    data.update(model_type="gemma", head_dim=16)
    (tmp_path / "config.json").write_text(json.dumps(data))
    assert not isinstance(load_config(tmp_path / "config.json"), JsonConfig)


def test_validate_fast_path_agrees_with_meta_model(tmp_path):
    """validate's config check uses hf_shapes for known families; it must expect exactly
    what a meta-device transformers model holds, tied lm_head optional."""
    from transformers import Qwen2Config

    from mfsdp_ckpt.convert.hf_config import expected_weights, expected_weights_for

    config = Qwen2Config(
        vocab_size=96,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
    )
    config.save_pretrained(tmp_path)
    fast, slow = expected_weights_for(tmp_path), expected_weights(config)
    assert fast.allowed == slow.allowed and fast.required == slow.required
    assert "lm_head.weight" not in fast.required and fast.tie_word_embeddings
