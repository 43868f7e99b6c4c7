"""verl's straight-through KL types (`k3+`, `low_var_kl+`, `k1+`, `abs+`, ...: the named
estimator's value with k2's gradient) and its `token-sum` loss mode are taken, by the config
and from verl's keys, and compute what their definitions say. Both were refused."""

from __future__ import annotations

from pathlib import Path
from typing import get_type_hints

import pytest
import torch

from trainer.config import load_config
from trainer.grpo.aggregation import LossScale, aggregate
from trainer.grpo.config import ActorConfig, GRPOConfig
from trainer.grpo.kl import KL_TYPES, KlLossType, kl_penalty
from trainer.verl_import import convert_verl

# d = log pi - log ref over a range that reaches k3's clamps (|d| > 20: its value is clamped)
LOG_PROB = torch.tensor([[-0.3, -2.0, -25.0, -0.01], [-1.5, -30.0, -0.7, -4.0]])
REF = torch.tensor([[-0.5, -1.0, -1.0, -3.0], [-1.5, -2.0, -26.0, -0.2]])


def _by_definition(kind: str, d: torch.Tensor) -> torch.Tensor:
    """Each estimator written from its definition (Schulman's k1/k2/k3, verl's clamps)."""
    if kind in ("k1", "kl"):
        return d
    if kind == "abs":
        return d.abs()
    if kind in ("k2", "mse"):
        return d * d / 2
    r = (-d).clamp(-20, 20)
    return (r.exp() - r - 1).clamp(-10, 10)


@pytest.mark.parametrize("base", ["k1", "kl", "abs", "k2", "mse", "k3", "low_var_kl"])
def test_a_plus_type_is_its_estimators_value_with_k2s_gradient(base):
    log_prob = LOG_PROB.clone().requires_grad_()
    value = kl_penalty(log_prob, REF, f"{base}+")
    d = LOG_PROB - REF
    torch.testing.assert_close(value.detach(), _by_definition(base, d))
    value.sum().backward()
    torch.testing.assert_close(log_prob.grad, d)  # k2 = d^2 / 2: its gradient is d


def test_the_plain_types_keep_their_own_gradient():
    log_prob = LOG_PROB.clone().requires_grad_()
    kl_penalty(log_prob, REF, "k1").sum().backward()
    torch.testing.assert_close(log_prob.grad, torch.ones_like(LOG_PROB))


def test_the_config_takes_every_type_kl_penalty_computes():
    assert get_type_hints(ActorConfig)["kl_loss_type"] == KlLossType
    for kind in KL_TYPES:
        cfg = load_config(GRPOConfig, None, [f"actor.kl_loss_type={kind}"])
        assert torch.isfinite(kl_penalty(LOG_PROB, REF, cfg.actor.kl_loss_type)).all()
    with pytest.raises(ValueError, match="kl_loss_type"):
        kl_penalty(LOG_PROB, REF, "k4+")


def test_token_sum_is_the_sum_over_every_rank_and_micro_batch():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]])
    by_hand = 1 + 2 + 4 + 7 + 8 + 9
    assert aggregate(loss, mask, "token-sum").item() == by_hand
    # one rank of 2 holding these rows, in 2 micro-batches: its shares times the data-parallel
    # size, which the gradient's average over the ranks divides out again
    scale = LossScale(tokens=12, sequences=6, dp_size=2, micro_batches=2)
    shares = aggregate(loss[:1], mask[:1], "token-sum", scale) + aggregate(
        loss[1:], mask[1:], "token-sum", scale
    )
    assert shares.item() == 2 * by_hand


@pytest.mark.parametrize(
    ("key", "path", "value"),
    [
        ("actor_rollout_ref.actor.kl_loss_type=k3+", "kl_loss_type", "k3+"),
        ("actor_rollout_ref.actor.kl_loss_type=low_var_kl+", "kl_loss_type", "low_var_kl+"),
        ("actor_rollout_ref.actor.loss_agg_mode=token-sum", "loss_agg_mode", "token-sum"),
    ],
)
def test_verls_keys_carry_over(tmp_path: Path, key, path, value):
    script = tmp_path / "run.sh"
    script.write_text(
        f"python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo \\\n    {key}\n"
    )
    done = convert_verl(script)
    assert done.dropped == []
    assert done.tree["actor"][path] == value
