"""Turn a (batch, response_len) per-token loss into the scalar whose gradient is the batch's.

verl's four modes, across micro-batches, gradient accumulation and data-parallel ranks, in
either of the two normalizations verl's workers use (`actor.loss_normalization`):

`global` (verl's engine workers: `trainer.use_legacy_worker_impl: disable`, and the only
ones verl has had since): a mini-batch is split over R ranks and M micro-batches each; its
gradient is the gradient of the mode's loss over the whole mini-batch at once. So each
micro-batch's loss is divided by the *global* count (tokens or sequences of the whole
mini-batch on all ranks), not by its own, and multiplied by the data-parallel size because
gradient reduction averages over ranks. Summing the micro-batch losses (backward on each) then
gives exactly the global loss.
For N_tok response tokens and N_seq responses in the global mini-batch:
  token-mean               sum_i sum_t l_it / N_tok
  token-sum                sum_i sum_t l_it, unnormalized (verl-project/verl 1dda039's
                           `agg_loss`: each rank's token sum times the data-parallel size,
                           so that the ranks' averaged gradient is the global sum's)
  seq-mean-token-sum       sum_i (sum_t l_it) / N_seq
  seq-mean-token-mean      sum_i (sum_t l_it / n_i) / N_seq
  seq-mean-token-sum-norm  sum_i (sum_t l_it / L) / N_seq, L a constant (the max response
                           length): Dr. GRPO's length-unbiased form, as verl's `agg_loss` has
                           taken it since verl-project/verl b8d91ef8d (2026-02-26; before,
                           its engine workers summed token sums over L alone, which no
                           normalization here trains).

`micro_batch` (verl's legacy workers, dp_actor.py, which `use_legacy_worker_impl: auto` ran
until verl made `disable` its default, 63e8a0d16, 2026-03-26): each micro-batch's loss is the
mode over that micro-batch alone (`agg_loss` with no global counts; seq-mean-token-sum-norm:
token sums over L alone, as verl's `agg_loss` took it before b8d91ef8d), weighted
1 / (micro-batches per rank), ranks averaged: the mean over the micro-batches of their own
means. A micro-batch of few tokens then weighs as much as one of many (token-mean): the same
tokens are weighted differently from `global`. From b8d91ef8d until verl removed it
(044bbba27, 2026-04-20) the legacy actor took seq-mean-token-sum-norm's sequence mean per
micro-batch: `global`'s loss while micro-batches hold equally many responses, as verl's
batch sizes make them; `mfsdp config from-verl` refuses to pick between the two.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:  # torch is imported where it is used: grpo/config.py reads the modes below
    import torch
    import torch.distributed as dist

# The one list of each: config validation reads the Literals, `aggregate` the tuple.
LossAggMode = Literal[
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
]
LossNormalization = Literal["global", "micro_batch"]
LOSS_AGG_MODES: tuple[LossAggMode, ...] = get_args(LossAggMode)


@dataclass(frozen=True)
class LossScale:
    """Counts of one global mini-batch that every micro-batch's loss is normalized by;
    `per_micro_batch`: the `micro_batch` normalization (module docstring)."""

    tokens: float
    sequences: float
    dp_size: int = 1
    norm_length: float | None = None
    micro_batches: float = 1.0
    per_micro_batch: bool = False

    @classmethod
    def local(cls, mask: torch.Tensor, norm_length: float | None = None) -> LossScale:
        """The batch is all there is: one micro-batch, one rank (verl's `agg_loss` without
        global batch info), a process group or not: summed over ranks, the counts doubled
        on 2 ranks and so did the data-parallel factor, which token-sum does not divide out."""
        return cls.of([mask], norm_length=norm_length, distributed=False)

    @classmethod
    def of(
        cls,
        masks: Iterable[torch.Tensor],
        norm_length: float | None = None,
        group: dist.ProcessGroup | None = None,
        distributed: bool | None = None,
        per_micro_batch: bool = False,
    ) -> LossScale:
        """Count the micro-batches' masks of this rank and sum the counts over the data-parallel
        group.

        `distributed=None` means: sum over ranks whenever a process group is initialized.
        """
        import torch
        import torch.distributed as dist

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
        return cls(tokens, sequences, dp_size, norm_length, micro_batches, per_micro_batch)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the mask's tokens (0 when the mask is empty), for metrics. Masked-out
    positions are left out, not multiplied by 0: a NaN or inf there (padding) stays out."""
    kept = values.where(mask.bool(), 0.0)
    return kept.sum() / mask.to(values.dtype).sum().clamp(min=1)


def aggregate(
    loss_mat: torch.Tensor, mask: torch.Tensor, mode: str, scale: LossScale | None = None
) -> torch.Tensor:
    """This micro-batch's share of the global loss; without `scale`, the loss of this batch
    alone."""
    if mode not in LOSS_AGG_MODES:
        raise ValueError(f"loss_agg_mode {mode!r} is not one of {', '.join(LOSS_AGG_MODES)}")
    if scale is None:
        scale = LossScale.local(mask)
    token_sums = loss_mat.where(mask.bool(), 0.0).sum(dim=-1)  # as verl's agg_loss:
    lengths = mask.to(loss_mat.dtype).sum(dim=-1)  # a NaN past the mask stays out
    norm_length = scale.norm_length if scale.norm_length is not None else mask.shape[-1]
    if scale.per_micro_batch:  # its own mean, weighted 1 / (micro-batches per rank)
        if mode == "seq-mean-token-sum-norm":  # agg_loss before b8d91ef8d: token sums / L
            own = token_sums.sum() / norm_length
        else:
            alone = LossScale(tokens=float(lengths.sum()), sequences=float((lengths > 0).sum()))
            own = _global_share(token_sums, lengths, mode, alone, norm_length)
        return own * scale.dp_size / scale.micro_batches
    return _global_share(token_sums, lengths, mode, scale, norm_length)


def _global_share(
    token_sums: torch.Tensor,
    lengths: torch.Tensor,
    mode: str,
    scale: LossScale,
    norm_length: float,
) -> torch.Tensor:
    """The micro-batch's share of the mode's loss over the counts of `scale` (module
    docstring, `global`), from its responses' token sums and lengths."""
    if mode == "token-mean":
        total, count = token_sums.sum(), scale.tokens
    elif mode == "token-sum":
        total, count = token_sums.sum(), 1.0
    elif mode == "seq-mean-token-sum":
        total, count = token_sums.sum(), scale.sequences
    elif mode == "seq-mean-token-sum-norm":
        total, count = token_sums.sum() / norm_length, scale.sequences
    else:
        total, count = (token_sums / lengths.clamp(min=1)).sum(), scale.sequences
    return total / max(count, 1.0) * scale.dp_size
