"""The static-cache decoder, forced (`decoder="static"`) on a model it cannot run, names
what it cannot run: a family it decodes (qwen2, llama) with a sliding layer or another
activation was refused as "does not support model_type 'qwen2'", a family it supports."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, MistralConfig, Qwen2Config

from trainer.rollout.static_cache import StaticCacheDecoder, supports

TINY: dict[str, Any] = {
    "vocab_size": 64,
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
}


def _model(config) -> torch.nn.Module:
    return AutoModelForCausalLM.from_config(config)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            Qwen2Config(**TINY, use_sliding_window=True, sliding_window=4, max_window_layers=1),
            r"layer_types sliding_attention \(only full_attention layers\)",
        ),
        (LlamaConfig(**TINY, hidden_act="gelu"), r"hidden_act 'gelu' \(only silu\)"),
        (MistralConfig(**TINY), r"model_type 'mistral' \(only qwen2, qwen3, llama\)"),
    ],
    ids=["qwen2-sliding", "llama-gelu", "mistral"],
)
def test_refusal_names_the_key_it_cannot_run(config, message):
    model = _model(config)
    assert not supports(model)
    with pytest.raises(ValueError, match=rf"^static-cache decoding does not support {message};"):
        StaticCacheDecoder(model, pad_token_id=0)


def test_a_full_attention_qwen2_is_decoded():
    model = _model(Qwen2Config(**TINY, use_sliding_window=False, max_window_layers=1))
    assert supports(model)
    StaticCacheDecoder(model, pad_token_id=0, cuda_graphs=False)
