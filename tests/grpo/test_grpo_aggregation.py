"""Loss aggregation: hand-computed modes, and exactness across micro-batches and ranks."""

from typing import get_args

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.support.distributed import run_distributed
from trainer.grpo.aggregation import (
    LOSS_AGG_MODES,
    LossNormalization,
    LossScale,
    aggregate,
    masked_mean,
)

LOSS = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 0.0, 0.0]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("token-mean", 17 / 5),  # (1+2+3+5+6) / 5 tokens
        ("token-sum", 1 + 2 + 3 + 5 + 6),  # unnormalized
        ("seq-mean-token-sum", (6 + 11) / 2),
        ("seq-mean-token-mean", (6 / 3 + 11 / 2) / 2),
        ("seq-mean-token-sum-norm", (6 + 11) / 2 / 4),  # seq-mean-token-sum over L = width 4
    ],
)
def test_modes_by_hand(mode, expected):
    assert aggregate(LOSS, MASK, mode).item() == pytest.approx(expected)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("past_the_mask", [float("nan"), float("inf")])
def test_a_non_finite_value_past_the_mask_stays_out(mode, past_the_mask):
    """Was: the mask multiplied in, so a NaN or inf at a masked-out position made the loss
    NaN; verl's agg_loss selects the kept positions (torch.where), as this does now."""
    loss = LOSS.clone()
    loss[1, 3] = past_the_mask
    assert aggregate(loss, MASK, mode).item() == pytest.approx(aggregate(LOSS, MASK, mode).item())
    assert masked_mean(loss, MASK).item() == pytest.approx(17 / 5)


def test_sum_norm_uses_configured_length():
    scale = LossScale.local(MASK, norm_length=8)
    assert aggregate(LOSS, MASK, "seq-mean-token-sum-norm", scale).item() == pytest.approx(
        (6 + 11) / 2 / 8
    )


def test_unknown_mode_is_rejected():
    with pytest.raises(ValueError, match="loss_agg_mode"):
        aggregate(LOSS, MASK, "seq-sum")


def test_masked_mean():
    assert masked_mean(LOSS, MASK).item() == pytest.approx(17 / 5)
    assert masked_mean(LOSS, torch.zeros_like(MASK)).item() == 0.0


def _random_batch(rows=6, width=7, seed=0):
    gen = torch.Generator().manual_seed(seed)
    loss = torch.randn(rows, width, generator=gen)
    lengths = torch.randint(1, width + 1, (rows,), generator=gen)
    mask = (torch.arange(width)[None, :] < lengths[:, None]).long()
    return loss, mask


EXACT_MODES = LOSS_AGG_MODES


@pytest.mark.parametrize("mode", EXACT_MODES)
def test_micro_batches_sum_to_the_whole_batch(mode):
    loss, mask = _random_batch()
    whole = aggregate(loss, mask, mode)
    chunks = [(loss[a:b], mask[a:b]) for a, b in ((0, 1), (1, 3), (3, 6))]  # uneven on purpose
    scale = LossScale.of([m for _, m in chunks], distributed=False)
    parts = sum(aggregate(part, m, mode, scale) for part, m in chunks)
    torch.testing.assert_close(parts, whole)
    # A micro-batch normalized by its own counts (the bug this guards against) gives another value.
    naive = sum(aggregate(part, m, mode) for part, m in chunks) / len(chunks)
    assert not torch.allclose(naive, whole)


def _verl_agg_loss(loss, mask, mode, scale_factor=None):
    """verl's core_algos.agg_loss with no global batch info (its legacy dp_actor's call, and
    its engine workers' for seq-mean-token-sum-norm), as verl writes it."""
    mask = mask.float()
    if mode == "token-mean":
        return (loss * mask).sum() / mask.sum()
    if mode == "token-sum":
        return (loss * mask).sum()
    seq_losses = torch.sum(loss * mask, dim=-1)
    if mode == "seq-mean-token-sum-norm":
        return torch.sum(seq_losses) / (scale_factor or mask.shape[-1])
    if mode == "seq-mean-token-mean":
        seq_losses = seq_losses / (torch.sum(mask, dim=-1) + 1e-8)
    seq_mask = (torch.sum(mask, dim=-1) > 0).float()
    return (seq_losses * seq_mask).sum() / seq_mask.sum()


def _chunks(loss, mask, bounds):
    return [(loss[a:b], mask[a:b]) for a, b in bounds]


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_micro_batch_normalization_is_verls_legacy_actor(mode):
    """dp_actor backs each micro-batch's own agg_loss up weighted 1 / gradient_accumulation."""
    loss, mask = _random_batch()
    chunks = _chunks(loss, mask, ((0, 2), (2, 4), (4, 6)))
    scale = LossScale.of(
        [m for _, m in chunks], norm_length=10, distributed=False, per_micro_batch=True
    )
    parts = sum(aggregate(part, m, mode, scale) for part, m in chunks)
    verl = sum(_verl_agg_loss(part, m, mode, 10) / len(chunks) for part, m in chunks)
    torch.testing.assert_close(parts, verl)


def test_token_mean_weights_tokens_by_the_normalization():
    """Responses of 6, 6, 1 and 1 tokens, two to a micro-batch: over the whole mini-batch
    each token weighs 1/14; each micro-batch's own mean, averaged, gives the short ones' tokens
    1/4 each and the long ones' 1/24."""
    loss = torch.zeros(4, 6)
    mask = torch.tensor([[1] * 6, [1] * 6, [1] + [0] * 5, [1] + [0] * 5])
    chunks = _chunks(loss, mask, ((0, 2), (2, 4)))
    weights = {}
    for normalization in get_args(LossNormalization):
        scale = LossScale.of(
            [m for _, m in chunks],
            distributed=False,
            per_micro_batch=normalization == "micro_batch",
        )
        grad = torch.zeros_like(loss)
        for (a, b), (_, m) in zip(((0, 2), (2, 4)), chunks, strict=True):
            part = loss[a:b].clone().requires_grad_()
            aggregate(part, m, "token-mean", scale).backward()
            grad[a:b] = part.grad
        weights[normalization] = (grad[0, 0].item(), grad[2, 0].item())
    assert weights["global"] == pytest.approx((1 / 14, 1 / 14))
    assert weights["micro_batch"] == pytest.approx((1 / 24, 1 / 4))


def _verl_1dda039_sum_norm(loss, mask, sequences, scale_factor):
    """verl-project/verl 1dda039's agg_loss for seq-mean-token-sum-norm with its global batch
    info (dp_size 1): the sequences' token sums over the global sequence count, over L."""
    seq_losses = torch.sum(loss * mask, dim=-1)
    seq_mask = (torch.sum(mask, dim=-1) > 0).float()
    return (seq_losses * seq_mask).sum() / sequences / scale_factor


def test_global_sum_norm_is_verls_current_agg_loss_over_micro_batches():
    loss, mask = _random_batch()
    chunks = _chunks(loss, mask, ((0, 3), (3, 6)))
    scale = LossScale.of([m for _, m in chunks], norm_length=10, distributed=False)
    parts = sum(aggregate(part, m, "seq-mean-token-sum-norm", scale) for part, m in chunks)
    verl = sum(_verl_1dda039_sum_norm(part, m, 6, 10) for part, m in chunks)
    torch.testing.assert_close(parts, verl)
    assert parts.item() == pytest.approx((loss * mask).sum().item() / 6 / 10)


def _rank_main(rank, world, results):
    loss, mask = _random_batch(rows=8, seed=3)
    out = {}
    for mode in LOSS_AGG_MODES:
        for per_micro_batch in (False, True):
            bounds = [(i, i + 2) for i in range(rank * 4, rank * 4 + 4, 2)]
            mine = _chunks(loss, mask, bounds)
            scale = LossScale.of([m for _, m in mine], per_micro_batch=per_micro_batch)
            local = sum(aggregate(part, m, mode, scale) for part, m in mine)
            # Gradient reduction averages over ranks; the averaged loss must be the global one.
            dist.all_reduce(local, op=dist.ReduceOp.SUM)
            if per_micro_batch:  # verl's legacy actor: the mean of the 4 micro-batches' own
                every = _chunks(loss, mask, [(i, i + 2) for i in range(0, 8, 2)])
                whole = sum(_verl_agg_loss(p, m, mode).item() for p, m in every) / 4
            else:
                whole = aggregate(loss, mask, mode).item()
            out[mode, per_micro_batch] = (local / world).item(), whole, scale.dp_size
    results[rank] = out


def test_data_parallel_ranks_average_to_the_global_loss():
    results = mp.Manager().dict()
    run_distributed(_rank_main, 2, results)
    for rank in range(2):
        assert len(results[rank]) == 2 * len(LOSS_AGG_MODES)
        for key, (averaged, global_value, dp_size) in results[rank].items():
            assert dp_size == 2
            assert averaged == pytest.approx(global_value, rel=1e-5), key
