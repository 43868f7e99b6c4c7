"""A config.json that leaves out a bias switch its family's config class defaults (Llama's
`mlp_bias` before transformers had it, `attention_bias` of Llama, Qwen3 and Qwen3-MoE) gets
the family's shape table, equal to the meta-device model transformers builds from the same
file: export and validate then need neither transformers' import nor a model build, and
read the config as written."""

from __future__ import annotations

import pytest
from transformers import AutoConfig, LlamaConfig, Qwen3Config, Qwen3MoeConfig

from mfsdp_ckpt.convert.hf_config import expected_weights
from mfsdp_ckpt.convert.hf_shapes import hf_state_dict_shapes

SMALL = dict(
    vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4
)
CONFIGS = {
    "llama": LlamaConfig(**SMALL, num_key_value_heads=2),
    "qwen3": Qwen3Config(**SMALL, num_key_value_heads=2, head_dim=16),
    "qwen3_moe": Qwen3MoeConfig(
        **SMALL, num_key_value_heads=2, head_dim=16, num_experts=4, moe_intermediate_size=24
    ),
}
CASES = {
    "llama without mlp_bias": ("llama", ("mlp_bias",)),
    "llama without attention_bias": ("llama", ("attention_bias",)),
    "llama without either": ("llama", ("attention_bias", "mlp_bias")),
    "qwen3 without attention_bias": ("qwen3", ("attention_bias",)),
    "qwen3_moe without attention_bias": ("qwen3_moe", ("attention_bias",)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_absent_bias_flag_takes_the_config_class_default(case):
    family, left_out = CASES[case]
    data = CONFIGS[family].to_dict()
    for key in left_out:
        data.pop(key)
    table = hf_state_dict_shapes(data)
    assert table is not None
    built = expected_weights(AutoConfig.for_model(**data))
    assert table == built.allowed
