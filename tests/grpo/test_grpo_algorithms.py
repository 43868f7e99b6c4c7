"""GRPO algorithm pieces against values computed by hand (numbers in the comments)."""

import math

import pytest
import torch

from trainer.grpo.advantage import group_advantages, grpo_token_advantages
from trainer.grpo.kl import kl_penalty
from trainer.grpo.logprobs import entropy_from_logits, token_log_probs
from trainer.grpo.policy_loss import ppo_clip_loss

# Groups interleaved on purpose: "a" = [1, 0, 0, 1], "b" = [1, 1], "c" = [0.7] (singleton).
SCORES = torch.tensor([1.0, 1.0, 0.0, 0.7, 0.0, 1.0, 1.0])
GROUPS = ["a", "b", "a", "c", "a", "a", "b"]


def test_grpo_advantage_normalized_by_unbiased_std():
    # group a: mean 0.5, unbiased std sqrt(4 * 0.25 / 3) = 0.577350..., so +-0.5 / (0.577350 + 1e-6)
    a = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    expected = torch.tensor(
        [a, 0.0, -a, 0.7, -a, a, 0.0]
    )  # b: std 0 -> 0 / eps = 0; c: (0.7 - 0) / 1
    got = group_advantages(SCORES, GROUPS, epsilon=1e-6, norm_adv_by_std=True)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


def test_grpo_advantage_without_std_is_centered_reward():
    got = group_advantages(SCORES, GROUPS, norm_adv_by_std=False)
    torch.testing.assert_close(got, torch.tensor([0.5, 0.0, -0.5, 0.7, -0.5, 0.5, 0.0]))


def test_grpo_advantage_epsilon_bounds_small_std():
    # group of [0, 0.001]: std = 0.000707107, eps 0.01 dominates: +-0.0005 / 0.010707107
    got = group_advantages(torch.tensor([0.0, 0.001]), [0, 0], epsilon=0.01)
    expected = 0.0005 / (0.001 / math.sqrt(2) + 0.01)
    torch.testing.assert_close(got, torch.tensor([-expected, expected]), rtol=1e-5, atol=0)


def test_grpo_token_advantages_broadcast_over_mask():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    got = grpo_token_advantages(torch.tensor([1.0, 0.0]), mask, [0, 0], norm_adv_by_std=False)
    torch.testing.assert_close(got, torch.tensor([[0.5, 0.5, 0.0], [-0.5, 0.0, 0.0]]))


def test_grpo_advantage_rejects_mismatched_ids():
    with pytest.raises(ValueError, match="one group id each"):
        group_advantages(torch.tensor([1.0, 0.0]), [0])


def _terms(ratios, advantages, **kw):
    old = torch.zeros(len(ratios))
    log_prob = torch.tensor([math.log(r) for r in ratios], requires_grad=True)
    return log_prob, ppo_clip_loss(log_prob, old, torch.tensor(advantages), **kw)


def test_ppo_clip_loss_cases():
    # (ratio, A): loss by hand
    #  1.5, +1: max(-1.5, -1.2) = -1.2 clipped      0.5, +1: max(-0.5, -0.8) = -0.5
    #  1.5, -1: max(1.5, 1.2) = 1.5 (cap 3)         0.5, -1: max(0.5, 0.8) = 0.8 clipped
    #  5.0, -1: max(5, 1.2) = 5 -> dual cap 3       1.1, +2: -2.2
    log_prob, terms = _terms([1.5, 0.5, 1.5, 0.5, 5.0, 1.1], [1.0, 1.0, -1.0, -1.0, -1.0, 2.0])
    torch.testing.assert_close(terms.loss, torch.tensor([-1.2, -0.5, 1.5, 0.8, 3.0, -2.2]))
    assert terms.clipped.tolist() == [True, False, False, True, False, False]
    assert terms.clipped_lower.tolist() == [False, False, False, False, True, False]
    # d loss / d log_prob = -A * ratio on the unclipped branch, 0 where clipped or capped
    terms.loss.sum().backward()
    torch.testing.assert_close(log_prob.grad, torch.tensor([0.0, -0.5, 1.5, 0.0, 0.0, -2.2]))


def test_ppo_clip_loss_asymmetric_ranges_and_dual_clip_c():
    # low 0.1, high 0.3: (1.5, +1) -> -1.3; (0.5, -1) -> 0.9; c = 2: (5.0, -1) -> 2
    _, terms = _terms(
        [1.5, 0.5, 5.0],
        [1.0, -1.0, -1.0],
        clip_ratio_low=0.1,
        clip_ratio_high=0.3,
        clip_ratio_c=2.0,
    )
    torch.testing.assert_close(terms.loss, torch.tensor([-1.3, 0.9, 2.0]))


def test_ppo_clip_loss_clamps_log_ratio():
    log_prob = torch.tensor([30.0, -30.0])
    terms = ppo_clip_loss(log_prob, torch.zeros(2), torch.tensor([1.0, 1.0]), log_ratio_clamp=20.0)
    torch.testing.assert_close(terms.neg_log_ratio, torch.tensor([-20.0, 20.0]))
    torch.testing.assert_close(terms.loss, torch.tensor([-1.2, -math.exp(-20.0)]))
    with pytest.raises(ValueError, match="clip_ratio_c"):
        ppo_clip_loss(log_prob, torch.zeros(2), torch.ones(2), clip_ratio_c=1.0)


def test_kl_estimators():
    # d = logp - ref: +1 and -1
    log_prob, ref = torch.tensor([-1.0, -2.0]), torch.tensor([-2.0, -1.0])
    torch.testing.assert_close(kl_penalty(log_prob, ref, "k1"), torch.tensor([1.0, -1.0]))
    torch.testing.assert_close(kl_penalty(log_prob, ref, "abs"), torch.tensor([1.0, 1.0]))
    torch.testing.assert_close(kl_penalty(log_prob, ref, "k2"), torch.tensor([0.5, 0.5]))
    # k3 = exp(-d) + d - 1: e^-1 + 0 = 0.3678794, e^1 - 2 = 0.7182818
    expected = torch.tensor([math.exp(-1), math.e - 2])
    torch.testing.assert_close(kl_penalty(log_prob, ref, "low_var_kl"), expected)
    torch.testing.assert_close(kl_penalty(log_prob, ref, "k3"), expected)


def test_low_var_kl_clamps():
    # d = -30: log ratio clamped to 20, e^20 - 21 clamped to 10; d = +30: e^-20 + 19 -> 10
    got = kl_penalty(torch.tensor([-30.0, 30.0]), torch.zeros(2), "low_var_kl")
    torch.testing.assert_close(got, torch.tensor([10.0, 10.0]))
    with pytest.raises(ValueError, match="kl_loss_type"):
        kl_penalty(torch.zeros(1), torch.zeros(1), "k4")


def test_token_log_probs_and_entropy():
    logits = torch.tensor([[0.0, math.log(3.0)]])  # p = [1/4, 3/4]
    torch.testing.assert_close(
        token_log_probs(logits, torch.tensor([1])), torch.tensor([math.log(0.75)])
    )
    # temperature 2: logits [0, ln3 / 2] -> p(0) = 1 / (1 + sqrt 3)
    torch.testing.assert_close(
        token_log_probs(logits, torch.tensor([0]), temperature=2.0),
        torch.tensor([-math.log(1 + math.sqrt(3))]),
    )
    # H = -(1/4 ln 1/4 + 3/4 ln 3/4) = 0.5623351
    torch.testing.assert_close(entropy_from_logits(logits), torch.tensor([0.5623351]))


def test_token_log_probs_match_log_softmax():
    torch.manual_seed(0)
    logits, tokens = torch.randn(3, 5, 50), torch.randint(0, 50, (3, 5))
    expected = torch.log_softmax(logits, -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(token_log_probs(logits, tokens), expected)


def test_rewards_near_float32s_range_give_finite_advantages():
    """Two rewards of 2e38 summed to infinity in the float32 group mean: NaN advantages, and
    the run stopped on "gradient norm is nan", blaming the gradient."""
    scores = torch.tensor([2e38, 2e38, -3e38, 3e38], dtype=torch.float32)
    got = group_advantages(scores, [0, 0, 1, 1])
    assert got.dtype == torch.float32 and bool(got.isfinite().all()), got
    assert got[:2].tolist() == [0.0, 0.0] and got[2] < 0 < got[3]
