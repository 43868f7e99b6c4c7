"""A NaN or inf at a position off the response mask (an advantage, an old or reference
log-prob, the policy's own log-prob) reaches neither the loss nor its gradient, under every
KL type and loss mode. `aggregate` kept such a value out of the loss's value alone: the
gradient there was 0 times a NaN derivative, NaN, and the run stopped on its norm."""

from __future__ import annotations

import pytest
import torch

from trainer.grpo.advantage import grpo_token_advantages
from trainer.grpo.aggregation import LOSS_AGG_MODES, aggregate
from trainer.grpo.kl import KL_TYPES, kl_penalty
from trainer.grpo.policy_loss import ppo_clip_loss

MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
LOG_PROB = torch.tensor([[-1.0, -2.0, -0.5, -1.0], [-0.3, -1.2, -0.8, -2.0]])
OLD = torch.tensor([[-1.1, -1.9, -0.6, -1.0], [-0.2, -1.5, -0.9, -2.1]])
REF = torch.tensor([[-1.3, -1.7, -0.9, -1.0], [-0.6, -1.0, -0.4, -2.2]])
ADVANTAGES = torch.tensor([[0.7] * 4, [-1.2] * 4])
BAD = [float("nan"), float("inf"), -float("inf")]


def _masked_out(values: torch.Tensor, bad: float) -> torch.Tensor:
    return values.where(MASK.bool(), bad)


def _loss_and_grad(loss_of) -> tuple[torch.Tensor, torch.Tensor]:
    log_prob = LOG_PROB.clone().requires_grad_()
    loss = loss_of(log_prob)
    loss.backward()
    assert log_prob.grad is not None
    return loss.detach(), log_prob.grad


@pytest.mark.parametrize("kl_type", KL_TYPES)
@pytest.mark.parametrize("bad", BAD)
def test_a_bad_reference_log_prob_off_the_mask_reaches_no_gradient(kl_type, bad):
    def loss_of(ref: torch.Tensor):
        return lambda lp: aggregate(kl_penalty(lp, ref, kl_type, mask=MASK), MASK, "token-mean")

    loss, grad = _loss_and_grad(loss_of(_masked_out(REF, bad)))
    clean_loss, clean_grad = _loss_and_grad(loss_of(REF))
    assert torch.isfinite(grad).all(), grad
    torch.testing.assert_close(loss, clean_loss)
    torch.testing.assert_close(grad, clean_grad)
    assert (grad[~MASK.bool()] == 0).all()


@pytest.mark.parametrize("what", ["advantages", "old", "log_prob"])
@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_a_bad_policy_loss_input_off_the_mask_reaches_no_gradient(what, bad, mode):
    def loss_of(poisoned: bool):
        def loss(lp: torch.Tensor) -> torch.Tensor:
            advantages, old = ADVANTAGES, OLD
            if poisoned and what == "advantages":
                advantages = _masked_out(advantages, bad)
            if poisoned and what == "old":
                old = _masked_out(old, bad)
            if poisoned and what == "log_prob":  # the policy's own, inside the graph
                lp = _masked_out(lp, bad)
            terms = ppo_clip_loss(lp, old, advantages, mask=MASK)
            return aggregate(terms.loss, MASK, mode)

        return loss

    loss, grad = _loss_and_grad(loss_of(poisoned=True))
    clean_loss, clean_grad = _loss_and_grad(loss_of(poisoned=False))
    assert torch.isfinite(grad).all(), grad
    torch.testing.assert_close(loss, clean_loss)
    torch.testing.assert_close(grad, clean_grad)
    assert (grad[~MASK.bool()] == 0).all()


def test_without_a_mask_every_position_is_kept():
    """No mask: every position is the loss's, a NaN advantage included (nothing hidden)."""
    advantages = ADVANTAGES.clone()
    advantages[0, 3] = float("nan")
    assert ppo_clip_loss(LOG_PROB, OLD, advantages).loss[0, 3].isnan()
    ref = REF.clone()
    ref[0, 3] = float("nan")
    assert kl_penalty(LOG_PROB, ref, "k1")[0, 3].isnan()


@pytest.mark.parametrize("bad", BAD)
def test_a_bad_reward_leaves_its_rows_padding_zero(bad):
    """A NaN or inf reward makes its row's advantages NaN, but the padding past the response
    stays 0 (it was NaN: NaN times the mask's 0)."""
    scores = torch.tensor([1.0, bad, 0.0, 2.0])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 0, 0]])
    advantages = grpo_token_advantages(scores, mask, ["a", "a", "b", "b"])
    assert (advantages[~mask.bool()] == 0).all(), advantages
    assert torch.isfinite(advantages[2:]).all()
