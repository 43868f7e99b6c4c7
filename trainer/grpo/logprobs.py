"""Log-probabilities and entropies of tokens from logits, without materializing log_softmax.

log p(t) = logit_t - logsumexp(logits): one gather and one reduction instead of a second
(batch, seq, vocab) tensor, which matters at a 150k vocabulary.
"""

from __future__ import annotations

import torch


def token_log_probs(
    logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """log p(tokens) under softmax(logits / temperature); logits (..., V), tokens (...) -> (...)."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    picked = logits.gather(-1, tokens.unsqueeze(-1).long()).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def entropy_from_logits(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy of softmax(logits / temperature) per position: logsumexp - E_p[logits]."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)
