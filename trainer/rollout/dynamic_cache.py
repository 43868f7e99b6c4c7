"""Batched decoding through the model's own forward and transformers' DynamicCache.

The path for any causal LM transformers can run (sliding-window, MoE, unusual attention):
slower than `static_cache` but with nothing model-specific. Left-padded prompts carry an
attention mask and explicit position ids, so padding changes nothing about the result.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch


class DynamicCacheDecoder:
    """prefill(prompts, n, max_new) then decode(tokens) step by step; one generation at a time."""

    def __init__(self, model: torch.nn.Module, pad_token_id: int):
        self.model = model
        self.pad_token_id = pad_token_id
        self.device = next(model.parameters()).device
        # transformers renamed `past_key_values` to `cache` (both exist across 5.x releases).
        parameters = inspect.signature(model.forward).parameters
        self.cache_arg = "cache" if "cache" in parameters else "past_key_values"
        self._cache: Any = None  # the model's own cache object (its class varies by release)
        self._mask: torch.Tensor | None = None

    def _run(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        out = self.model(
            input_ids=tokens,
            attention_mask=self._mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **{self.cache_arg: self._cache},
        )
        self._cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        return out.logits[:, -1].float()

    def prefill(self, prompts: list[list[int]], n: int, max_new_tokens: int) -> torch.Tensor:
        longest = max(len(p) for p in prompts)
        rows = [p for p in prompts for _ in range(n)]
        tokens = torch.full(
            (len(rows), longest), self.pad_token_id, dtype=torch.long, device=self.device
        )
        self._mask = torch.zeros_like(tokens)
        for row, prompt in enumerate(rows):
            tokens[row, longest - len(prompt) :] = torch.tensor(prompt, device=self.device)
            self._mask[row, longest - len(prompt) :] = 1
        self._cache = None
        positions = (self._mask.cumsum(-1) - 1).clamp(min=0)
        self._next_position = positions[:, -1:] + 1
        return self._run(tokens, positions)

    def decode(self, tokens: torch.Tensor) -> torch.Tensor:
        assert self._mask is not None  # set by prefill
        self._mask = torch.cat([self._mask, torch.ones_like(self._mask[:, :1])], dim=-1)
        positions = self._next_position
        self._next_position = positions + 1
        return self._run(tokens.view(-1, 1), positions)

    def keep_rows(self, index: torch.Tensor) -> None:
        """Decode only the current rows at `index` from now on, in that order (the rows that are
        still generating); the cache's own reorder, as beam search uses it."""
        assert self._mask is not None  # set by prefill
        self._cache.reorder_cache(index)
        self._mask = self._mask[index]
        self._next_position = self._next_position[index]

    def release(self) -> None:
        self._cache, self._mask = None, None
