"""`rollout.top_k: 0` is off, as -1 is: vLLM reads 0 as "disable", verl's key already maps 0
to off, and the hf engine filters only at top_k >= 1. It was refused ("must be -1 (off) or
>= 1, got 0") by the config and by the engines' sampling settings."""

import pytest
import torch

from trainer.config import ConfigError, load_config
from trainer.grpo.config import GRPOConfig
from trainer.rollout.base import SamplingParams
from trainer.rollout.fused_sampling import fusable
from trainer.rollout.sampling import filter_logits


def test_top_k_zero_loads_and_samples_unfiltered():
    config = load_config(GRPOConfig, None, ["rollout.top_k=0"])
    assert config.rollout.top_k == 0
    params = SamplingParams(top_k=config.rollout.top_k)
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0]])
    assert torch.equal(filter_logits(logits, params), filter_logits(logits, SamplingParams()))
    assert fusable(params)  # no filter: the fused pick takes it


def test_top_k_below_minus_one_is_still_refused():
    with pytest.raises(ConfigError, match=r"'rollout.top_k' must be -1 or 0 \(off\) or >= 1"):
        load_config(GRPOConfig, None, ["rollout.top_k=-2"])
    with pytest.raises(ValueError, match="top_k -2"):
        SamplingParams(top_k=-2)
