"""Token sampling draws from the filtered distribution: right frequencies, never a filtered
token."""

from __future__ import annotations

import math

import torch

from trainer.rollout.base import SamplingParams
from trainer.rollout.sampling import sample_next


def _frequencies(logits: torch.Tensor, params: SamplingParams, draws: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    chosen = sample_next(logits.expand(draws, -1), params, generator)
    return torch.bincount(chosen, minlength=logits.shape[-1]).double() / draws


def test_samples_follow_softmax_at_temperature():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, -30.0]])
    params = SamplingParams(temperature=0.7)
    expected = torch.softmax(logits[0].double() / 0.7, dim=-1)
    draws = 200_000
    seen = _frequencies(logits, params, draws)
    tolerance = 5 * torch.sqrt(expected * (1 - expected) / draws) + 1e-4  # five standard errors
    assert torch.all((seen - expected).abs() <= tolerance), (seen, expected)


def test_top_k_and_top_p_filtered_tokens_are_never_drawn():
    logits = torch.tensor([[3.0, 2.9, 2.8, 0.0, 0.0, 0.0]])
    assert _frequencies(logits, SamplingParams(top_k=2), 50_000)[2:].sum() == 0
    kept = torch.softmax(logits[0], -1)[:3].sum().item()  # the first three carry ~kept of the mass
    seen = _frequencies(logits, SamplingParams(top_p=kept - 0.01), 50_000)
    assert seen[3:].sum() == 0 and math.isclose(seen[:3].sum().item(), 1.0)
    assert seen[2] > 0.2  # the third token is inside the nucleus


def test_same_seed_same_tokens():
    logits = torch.randn(64, 1000)
    first = sample_next(logits, SamplingParams(), torch.Generator().manual_seed(7))
    again = sample_next(logits, SamplingParams(), torch.Generator().manual_seed(7))
    other = sample_next(logits, SamplingParams(), torch.Generator().manual_seed(8))
    assert torch.equal(first, again) and not torch.equal(first, other)
