"""A Megatron MoE checkpoint exports only where the Hugging Face family weighs the chosen
experts as Megatron-core's router did, at every top-k, top-1 included.

Megatron-core (moe_utils.topk_routing_with_score_function, softmax score function): without
pre-softmax it takes the top-k logits and softmaxes them (top-1: weight 1.0); with
`moe_router_pre_softmax` it softmaxes over all experts and takes the top k as they are
(top-1: the expert's probability p < 1). Mixtral always renormalises the top k, so it
computes the first only (and the second only when every expert is chosen); Qwen2-/Qwen3-MoE
compute either by norm_topk_prob. The reference here is the source model with its routers
computing Megatron's weights; the export, loaded as a user would, must give its logits, or
be refused in one line naming the setting.
"""

from __future__ import annotations

import json
import types

import pytest
import torch
import torch.nn.functional as F

from tests.support.export import logits_of
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import megatron_args, megatron_run, source_logits

EXPERTS = 4  # hf_to_mcore's MoE families


def _megatron_router(pre_softmax: bool):
    """A transformers TopKRouter forward computing Megatron-core's routing weights."""

    def forward(self, hidden_states):
        hidden = hidden_states.reshape(-1, self.hidden_dim)
        logits = F.linear(hidden, self.weight)
        if pre_softmax:  # softmax over all experts, the top k kept as they are
            weights, chosen = torch.topk(torch.softmax(logits.float(), dim=-1), self.top_k, dim=-1)
        else:  # the top k logits, softmaxed among themselves
            top, chosen = torch.topk(logits.float(), self.top_k, dim=-1)
            weights = torch.softmax(top, dim=-1)
        return logits, weights.to(logits.dtype), chosen

    return forward


def _megatron_logits(model, pre_softmax: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed inputs and the logits `model`'s weights give under Megatron's routing."""
    routers = [m for m in model.modules() if type(m).__name__.endswith("TopKRouter")]
    assert routers, type(model).__name__
    originals = [router.forward for router in routers]
    for router in routers:
        router.forward = types.MethodType(_megatron_router(pre_softmax), router)
    try:
        return source_logits(model)
    finally:
        for router, original in zip(routers, originals, strict=True):
            router.forward = original


def _differs(one: torch.Tensor, other: torch.Tensor) -> bool:
    return not torch.allclose(one, other, rtol=0, atol=1e-4)


@pytest.mark.parametrize("topk", [1, 2, EXPERTS])
@pytest.mark.parametrize("pre_softmax", [True, False])
@pytest.mark.parametrize("family", ["mixtral", "qwen3_moe", "qwen2_moe"])
def test_an_export_weighs_experts_as_megatron_did(family, pre_softmax, topk, tmp_path):
    """Was: Mixtral top-1 with pre-softmax exported with exit 0, each token's expert
    weighted 1.0 where Megatron weighed it p."""
    model = tiny_causal_lm(family, num_experts_per_tok=topk)
    args = megatron_args(model, moe_router_pre_softmax=pre_softmax, moe_router_topk=topk)
    run = megatron_run(tmp_path, model, args)
    ids, expected = _megatron_logits(model, pre_softmax)
    out = tmp_path / "hf"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out)
    if family == "mixtral" and pre_softmax and topk < EXPERTS:
        line = one_error_line(err)
        assert code == 1 and "moe_router_pre_softmax=True cannot be exported as mixtral" in line
        assert not out.exists()
        # the refusal is due: Mixtral's own routing computes another model
        assert _differs(source_logits(model)[1], expected)
        return
    assert code == 0, stdout + err
    config = json.loads((out / "config.json").read_text())
    assert config["num_experts_per_tok"] == topk, config
    torch.testing.assert_close(logits_of(out, ids), expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("stated", [True, False])
def test_a_qwen_moe_config_is_held_to_the_recorded_router_at_top_1(stated, tmp_path):
    """norm_topk_prob decides a top-1 token's weight too (1.0 or p): a --hf-config stating
    the other one than moe_router_pre_softmax gives is refused, the matching one exports
    Megatron's logits."""
    model = tiny_causal_lm("qwen3_moe", num_experts_per_tok=1, norm_topk_prob=stated)
    run = megatron_run(tmp_path, model, megatron_args(model, moe_router_pre_softmax=True))
    model.config.save_pretrained(tmp_path / "given")
    ids, expected = _megatron_logits(model, pre_softmax=True)
    out = tmp_path / "hf"
    code, stdout, err = run_cli(
        "ckpt", "export-hf", run, "--out", out, "--hf-config", tmp_path / "given"
    )
    if stated:
        line = one_error_line(err)
        assert code == 2 and "norm_topk_prob=True (record: moe_router_pre_softmax True)" in line
        assert _differs(source_logits(model)[1], expected)
        return
    assert code == 0, stdout + err
    torch.testing.assert_close(logits_of(out, ids), expected, rtol=0, atol=1e-5)
