"""Training may start from a mixture-of-experts checkpoint (`model.path`): its weights
stream into the transformers model built from its config, whose experts transformers 5.x
holds fused (`mlp.experts.gate_up_proj` [E, 2I, H]) while checkpoints and exports name each
expert's tensor. The model so loaded computes the source model's logits."""

from __future__ import annotations

import pytest
import torch

from mfsdp_ckpt.format.checkpoint_resolution import resolve_checkpoint
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.megatron_checkpoints import (
    megatron_args,
    megatron_run,
    save_dcp,
    source_logits,
)
from trainer.model_source import ModelSource, load_checkpoint_weights


def _loaded(config, checkpoint) -> torch.nn.Module:
    """A randomly initialised model of `config` with the checkpoint's weights loaded."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    load_checkpoint_weights(model, ModelSource(assets=None, checkpoint=checkpoint))
    return model


@pytest.mark.parametrize("family", ["qwen3_moe", "qwen2_moe", "mixtral"])
@pytest.mark.parametrize("experts", ["grouped", "sequential"])
def test_a_megatron_moe_checkpoint_loads_into_the_fused_model(family, experts, tmp_path):
    source = tiny_causal_lm(family)
    run = megatron_run(tmp_path, source, megatron_args(source), experts=experts)
    model = _loaded(source.config, resolve_checkpoint(run))
    ids, expected = source_logits(source)
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, expected, rtol=0, atol=1e-5)


def test_an_hf_layout_checkpoint_with_fused_experts_loads_as_it_was(tmp_path):
    source = tiny_causal_lm("mixtral")
    ckpt = save_dcp({"model": dict(source.state_dict())}, tmp_path / "d")
    model = _loaded(source.config, resolve_checkpoint(ckpt))
    ids, expected = source_logits(source)
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, expected, rtol=0, atol=1e-5)


def test_a_checkpoint_lacking_an_expert_names_it(tmp_path):
    from tests.support.megatron_checkpoints import mcore_weights
    from trainer.config import ConfigError

    source = tiny_causal_lm("qwen3_moe")
    weights = mcore_weights(source, experts="sequential")
    del weights["module.decoder.layers.1.mlp.experts.local_experts.2.linear_fc2.weight"]
    ckpt = save_dcp({"model": weights}, tmp_path / "d")
    with pytest.raises(ConfigError, match=r"layers\.1\.mlp\.experts\.2\.down_proj\.weight"):
        _loaded(source.config, resolve_checkpoint(ckpt))
