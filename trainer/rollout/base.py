"""The rollout interface the GRPO loop talks to, and the batch it gets back.

Responses come back grouped: row `i * n + j` is sample `j` of prompt `i`, padded on the right,
with a mask that covers every generated token up to and including the end-of-sequence token
(the tokens the policy is trained on). Log-probs, when asked for, are of the model's raw
distribution (no temperature, top-k or top-p), the same quantity for every engine.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch


@dataclass(frozen=True)
class SamplingParams:
    """verl's rollout names. temperature 0 means greedy (validation); top_k -1 or 0 and top_p 1
    mean off (each engine reads a top_k below 1 as off)."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 512
    seed: int | None = None
    logprobs: bool = False

    def __post_init__(self) -> None:
        if self.n < 1 or self.max_tokens < 1:
            raise ValueError(
                f"rollout n ({self.n}) and max response length ({self.max_tokens}) must be >= 1"
            )
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.top_k < -1:
            raise ValueError(
                f"bad sampling: temperature {self.temperature} (>= 0), "
                f"top_p {self.top_p} (in (0, 1]), top_k {self.top_k} (-1 or 0 for off, or >= 1)"
            )

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass
class RolloutBatch:
    response_ids: torch.Tensor  # (rows, length) int64, pad after the end
    response_mask: torch.Tensor  # (rows, length) int64, 1 on generated tokens incl. EOS
    logprobs: torch.Tensor | None  # (rows, length) float32, 0 off the mask
    prompt_index: list[int]  # which prompt each row answers

    def lengths(self) -> list[int]:
        return self.response_mask.sum(dim=-1).tolist()

    def token_lists(self) -> list[list[int]]:
        """Each response's tokens without padding."""
        return [row[:length].tolist() for row, length in zip(self.response_ids, self.lengths())]


class RolloutEngine(ABC):
    """Generates from token ids; holds its own copy of the weights, refreshed by
    `update_weights`."""

    name: ClassVar[str]  # the rollout.name that picks it, for the lines that name the engine

    @abstractmethod
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> RolloutBatch:
        """n responses for each prompt (token ids without padding)."""

    @abstractmethod
    def update_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load full (unsharded) tensors under Hugging Face parameter names; later calls see
        them."""

    def close(self) -> None:  # noqa: B027 (optional: most engines hold nothing to free)
        """Free the engine's memory; it is not used afterwards."""


def pack_responses(
    responses: Sequence[Sequence[int]],
    logprobs: Sequence[Sequence[float]] | None,
    prompt_index: list[int],
    pad_token_id: int,
) -> RolloutBatch:
    """Right-pad variable-length responses into a RolloutBatch (at least one column)."""
    width = max(1, max((len(r) for r in responses), default=1))
    ids = torch.full((len(responses), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(responses), width), dtype=torch.long)
    lps = (
        torch.zeros((len(responses), width), dtype=torch.float32) if logprobs is not None else None
    )
    for row, tokens in enumerate(responses):
        ids[row, : len(tokens)] = torch.tensor(list(tokens), dtype=torch.long)
        mask[row, : len(tokens)] = 1
        if lps is not None and logprobs is not None:  # both or neither
            lps[row, : len(tokens)] = torch.tensor(list(logprobs[row]), dtype=torch.float32)
    return RolloutBatch(
        response_ids=ids, response_mask=mask, logprobs=lps, prompt_index=prompt_index
    )
