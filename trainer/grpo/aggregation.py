"""Turn a (batch, response_len) per-token loss into the scalar whose gradient is the batch's.

verl's four modes, made exact across micro-batches, gradient accumulation and data-parallel
ranks. A mini-batch is split over R ranks and M micro-batches each; its gradient must equal the
gradient of the mode's loss over the whole mini-batch at once. So each micro-batch's loss is
divided by the *global* count (tokens, sequences or micro-batches of the whole mini-batch on all
ranks), not by its own, and multiplied by the data-parallel size because gradient reduction
averages over ranks. Summing the micro-batch losses (backward on each) then gives exactly the
global loss.

Modes, for N_tok response tokens, N_seq responses and N_mb micro-batches in the global
mini-batch:
  token-mean               sum_i sum_t l_it / N_tok
  seq-mean-token-sum       sum_i (sum_t l_it) / N_seq
  seq-mean-token-mean      sum_i (sum_t l_it / n_i) / N_seq
  seq-mean-token-sum-norm  sum_i (sum_t l_it / L) / N_mb, L a constant (the max response
                           length): Dr. GRPO's length-unbiased form as verl scales it. verl's
                           `agg_loss` divides a micro-batch's token sums by L alone (no
                           sequence count, nor data-parallel size), and its actor weights each
                           micro-batch 1 / (micro-batches per rank), ranks averaged: the mean
                           over micro-batches, so the scale grows with the micro-batch size.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.distributed as dist

LOSS_AGG_MODES = (
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)


@dataclass(frozen=True)
class LossScale:
    """Counts of one global mini-batch that every micro-batch's loss is normalized by."""

    tokens: float
    sequences: float
    dp_size: int = 1
    norm_length: float | None = None
    micro_batches: float = 1.0

    @classmethod
    def local(cls, mask: torch.Tensor, norm_length: float | None = None) -> LossScale:
        """The batch is all there is: one micro-batch, one rank (verl's `agg_loss`)."""
        return cls.of([mask], norm_length=norm_length, group=None)

    @classmethod
    def of(
        cls,
        masks: Iterable[torch.Tensor],
        norm_length: float | None = None,
        group: dist.ProcessGroup | None = None,
        distributed: bool | None = None,
    ) -> LossScale:
        """Count the micro-batches' masks of this rank and sum the counts over the data-parallel
        group.

        `distributed=None` means: sum over ranks whenever a process group is initialized.
        """
        masks = list(masks)
        if not masks:
            raise ValueError("LossScale needs at least one micro-batch mask")
        counts = torch.zeros(3, dtype=torch.float64, device=masks[0].device)
        counts[2] = len(masks)
        for mask in masks:
            per_seq = mask.sum(dim=-1)
            counts[0] += per_seq.sum().double()
            counts[1] += (per_seq > 0).sum().double()
        dp_size = 1
        if distributed is None:
            distributed = dist.is_available() and dist.is_initialized()
        if distributed:
            dist.all_reduce(counts, op=dist.ReduceOp.SUM, group=group)
            dp_size = dist.get_world_size(group)
        tokens, sequences, micro_batches = counts.tolist()
        return cls(tokens, sequences, dp_size, norm_length, micro_batches)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the mask's tokens (0 when the mask is empty), for metrics."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1)


def aggregate(
    loss_mat: torch.Tensor, mask: torch.Tensor, mode: str, scale: LossScale | None = None
) -> torch.Tensor:
    """This micro-batch's share of the global loss; without `scale`, the loss of this batch
    alone."""
    if mode not in LOSS_AGG_MODES:
        raise ValueError(f"loss_agg_mode {mode!r} is not one of {', '.join(LOSS_AGG_MODES)}")
    if scale is None:
        scale = LossScale.local(mask)
    mask = mask.to(loss_mat.dtype)
    token_sums = (loss_mat * mask).sum(dim=-1)
    if mode == "token-mean":
        total, count = token_sums.sum(), scale.tokens
    elif mode == "seq-mean-token-sum":
        total, count = token_sums.sum(), scale.sequences
    elif mode == "seq-mean-token-mean":
        total, count = (token_sums / mask.sum(dim=-1).clamp(min=1)).sum(), scale.sequences
    else:
        norm_length = scale.norm_length if scale.norm_length is not None else mask.shape[-1]
        total, count = token_sums.sum() / norm_length, scale.micro_batches
    return total / max(count, 1.0) * scale.dp_size
