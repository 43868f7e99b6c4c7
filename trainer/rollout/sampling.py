"""Pick the next token from logits: greedy, or temperature / top-k / top-p sampling.

Same order as vLLM and transformers: temperature first, then top-k, then top-p (nucleus,
keeping the smallest set whose probability reaches top_p, and always the most likely token).
"""

from __future__ import annotations

from typing import cast

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
    logits: torch.Tensor,
    params: SamplingParams,
    generator: torch.Generator | None,
    rows: torch.Tensor | None = None,
    batch_rows: int | None = None,
) -> torch.Tensor:
    """(rows, vocab) logits -> (rows,) token ids.

    `rows`: where these logits' rows sit in a batch of `batch_rows` rows from which ended rows
    have been dropped. The random draw is made for the whole batch and these rows take their
    share of it, so a row samples the same token whether or not the batch was compacted
    (bit for bit where its logits are; the draw for the dropped rows is the price, a fraction
    of a decode step's memory traffic)."""
    if params.greedy:
        return logits.argmax(dim=-1)
    scores = filter_logits(logits, params)
    # The Gumbel-max race, argmax(logit - log E) with E ~ Exp(1), draws from softmax(logits)
    # exactly as multinomial does, minus multinomial's validity check, which reads a value back
    # to the host and so makes every decode step wait for the GPU to go idle, and without a
    # softmax pass over the vocabulary. E is kept above 0 so that its log is finite; a
    # filtered-out token (-inf) can then never win.
    shape = (scores.shape[0] if rows is None else cast(int, batch_rows), scores.shape[1])
    noise = scores.new_empty(shape).exponential_(generator=generator)
    noise = noise[rows] if rows is not None else noise
    return scores.sub_(noise.clamp_(min=torch.finfo(noise.dtype).tiny).log_()).argmax(dim=-1)


def chosen_logprob(logits: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
    """log_softmax(logits) at each row's `chosen` token, in fp32 whatever the logits' dtype (the
    GRPO actor's log-probs are compared against these), without writing the whole
    (rows, vocab) log-softmax."""
    scores = logits.float()
    return scores.gather(-1, chosen.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(scores, dim=-1)
