"""PPO's clipped surrogate with dual clipping, per token (aggregate with `aggregation.aggregate`).

ratio = exp(log pi - log pi_old), the log-ratio clamped to +-`log_ratio_clamp` so one token
whose probability collapsed cannot produce inf. For advantage A:
  loss = max(-A * ratio, -A * clip(ratio, 1 - low, 1 + high))
and for A < 0 the loss is further capped at -A * c (dual clip, c > 1): without it a token whose
ratio has grown huge under a negative advantage would dominate the gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer.grpo.masking import off_mask_zeroed


@dataclass
class PolicyLossTerms:
    """Per-token tensors, all shaped like the advantages."""

    loss: torch.Tensor
    clipped: torch.Tensor  # the clipped branch was taken (ratio outside [1-low, 1+high] against A)
    clipped_lower: torch.Tensor  # the dual-clip cap was taken (A < 0 only)
    neg_log_ratio: (
        torch.Tensor
    )  # log pi_old - log pi, whose mean is the approximate KL to the old policy


def ppo_clip_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float = 3.0,
    log_ratio_clamp: float = 20.0,
    mask: torch.Tensor | None = None,
) -> PolicyLossTerms:
    """verl's vanilla policy loss, before aggregation; 0 off `mask`, where the inputs are
    taken out before any term is formed (`masking`: a NaN there reaches no gradient)."""
    if clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be > 1 (dual-clip bound), got {clip_ratio_c}")
    log_prob, old_log_prob, advantages = off_mask_zeroed(mask, log_prob, old_log_prob, advantages)
    log_ratio = torch.clamp(log_prob - old_log_prob, min=-log_ratio_clamp, max=log_ratio_clamp)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    pessimistic = torch.maximum(unclipped, clipped)
    cap = -advantages * clip_ratio_c
    dual = torch.minimum(pessimistic, cap)
    negative = advantages < 0
    return PolicyLossTerms(
        loss=torch.where(negative, dual, pessimistic),
        clipped=clipped > unclipped,
        clipped_lower=(pessimistic > cap) & negative,
        neg_log_ratio=-log_ratio,
    )
