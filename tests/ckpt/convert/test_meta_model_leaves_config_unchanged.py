"""Building the meta-device model a config implies leaves that config as it was read.

transformers' `from_config` sets the config it is given to the dtype (and attention) it
builds the model in; export chose `--dtype auto` from the same config object afterwards
and wrote float32 under a bf16 release's config.json."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig

from mfsdp_ckpt.convert.hf_config import expected_weights, meta_causal_lm

SMALL = dict(
    vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4
)


@pytest.mark.parametrize("build", [meta_causal_lm, expected_weights])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_config_keeps_its_dtype_and_settings(build, dtype):
    config = AutoConfig.for_model(
        "llama", **SMALL, num_key_value_heads=2, dtype=dtype, attn_implementation="sdpa"
    )
    before = config.to_dict()
    build(config)
    assert config.dtype == getattr(torch, dtype)
    assert config.to_dict() == before
