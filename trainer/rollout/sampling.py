"""Pick the next token from logits: greedy, or temperature / top-k / top-p sampling.

Same order as vLLM and transformers: temperature first, then top-k, then top-p (nucleus,
keeping the smallest set whose probability reaches top_p, and always the most likely token).
"""

from __future__ import annotations

import torch

from trainer.rollout.base import SamplingParams


def filter_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Temperature-scaled logits with the tokens outside top-k / top-p set to -inf."""
    logits = logits.float() / params.temperature
    if params.top_k > 0 and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs
        drop_sorted = mass_before >= params.top_p
        drop_sorted[..., 0] = False
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sample_next(
    logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None
) -> torch.Tensor:
    """(rows, vocab) logits -> (rows,) token ids."""
    if params.greedy:
        return logits.argmax(dim=-1)
    probs = torch.softmax(filter_logits(logits, params), dim=-1)
    # The exponential race, argmax(p / E) with E ~ Exp(1), draws from `probs` exactly as
    # multinomial does, minus multinomial's validity check, which reads a value back to the
    # host and so makes every decode step wait for the GPU to go idle. E is kept above 0 so
    # that a filtered-out token (p = 0) can never win through 0 / 0.
    race = (
        torch.empty_like(probs)
        .exponential_(generator=generator)
        .clamp_(min=torch.finfo(probs.dtype).tiny)
    )
    return probs.div_(race).argmax(dim=-1)
