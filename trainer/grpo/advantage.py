"""GRPO outcome advantages: each response is scored against the other responses to its prompt.

One scalar reward per response; the advantage is (r - group mean) / (group std + epsilon), with
the unbiased std as in verl and the GRPO paper, or r - group mean when `norm_adv_by_std=False`
(Dr. GRPO). A group of one has nothing to compare against: mean 0 and std 1, so its advantage
is its raw reward (verl's convention), which keeps a lone sample's signal instead of zeroing it.
The advantage is broadcast over the response tokens and zeroed outside the response mask.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch


def group_advantages(
    scores: torch.Tensor,
    group_ids: Sequence[Hashable],
    epsilon: float = 1e-6,
    norm_adv_by_std: bool = True,
) -> torch.Tensor:
    """Per-response advantages (shape like `scores`, one per response) from per-group statistics."""
    if scores.dim() != 1 or len(group_ids) != scores.shape[0]:
        raise ValueError(
            f"scores must be 1-D with one group id each, got {tuple(scores.shape)} and "
            f"{len(group_ids)} ids"
        )
    # statistics in float64: float32 rewards near its range (2e38 each) summed to infinity
    # in the group mean, and the run stopped on a NaN gradient norm, blaming the gradient
    scores = scores.detach().double()
    members: dict[Hashable, list[int]] = {}
    for position, group in enumerate(group_ids):
        members.setdefault(group, []).append(position)
    advantages = torch.empty_like(scores)
    for positions in members.values():
        index = torch.tensor(positions, device=scores.device)
        group_scores = scores[index]
        if len(positions) == 1:
            mean, std = torch.zeros((), device=scores.device), torch.ones((), device=scores.device)
        else:
            mean, std = group_scores.mean(), group_scores.std(unbiased=True)
        centered = group_scores - mean
        advantages[index] = centered / (std + epsilon) if norm_adv_by_std else centered
    return advantages.float()


def grpo_token_advantages(
    scores: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: Sequence[Hashable],
    epsilon: float = 1e-6,
    norm_adv_by_std: bool = True,
) -> torch.Tensor:
    """verl's `compute_grpo_outcome_advantage`: (batch, response_len) advantages, 0 off the
    mask, whatever the response's own (a NaN reward's NaN times 0 was NaN there)."""
    per_response = group_advantages(
        scores, group_ids, epsilon=epsilon, norm_adv_by_std=norm_adv_by_std
    )
    return per_response.unsqueeze(-1).where(response_mask.bool(), 0.0)
