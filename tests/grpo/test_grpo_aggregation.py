"""Loss aggregation: hand-computed modes, and exactness across micro-batches and ranks."""

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.support.distributed import run_distributed
from trainer.grpo.aggregation import LOSS_AGG_MODES, LossScale, aggregate, masked_mean

LOSS = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 0.0, 0.0]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("token-mean", 17 / 5),  # (1+2+3+5+6) / 5 tokens
        ("seq-mean-token-sum", (6 + 11) / 2),
        ("seq-mean-token-mean", (6 / 3 + 11 / 2) / 2),
        ("seq-mean-token-sum-norm", (6 + 11) / 4),  # L = mask width 4; no sequence count
    ],
)
def test_modes_by_hand(mode, expected):
    assert aggregate(LOSS, MASK, mode).item() == pytest.approx(expected)


def test_sum_norm_uses_configured_length():
    scale = LossScale.local(MASK, norm_length=8)
    assert aggregate(LOSS, MASK, "seq-mean-token-sum-norm", scale).item() == pytest.approx(
        (6 + 11) / 8
    )


def test_unknown_mode_is_rejected():
    with pytest.raises(ValueError, match="loss_agg_mode"):
        aggregate(LOSS, MASK, "token-sum")


def test_masked_mean():
    assert masked_mean(LOSS, MASK).item() == pytest.approx(17 / 5)
    assert masked_mean(LOSS, torch.zeros_like(MASK)).item() == 0.0


def _random_batch(rows=6, width=7, seed=0):
    gen = torch.Generator().manual_seed(seed)
    loss = torch.randn(rows, width, generator=gen)
    lengths = torch.randint(1, width + 1, (rows,), generator=gen)
    mask = (torch.arange(width)[None, :] < lengths[:, None]).long()
    return loss, mask


EXACT_MODES = [mode for mode in LOSS_AGG_MODES if mode != "seq-mean-token-sum-norm"]


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


def _verl_agg_loss_sum_norm(loss, mask, scale_factor):
    """verl's core_algos.agg_loss for seq-mean-token-sum-norm, loss_scale_factor null."""
    seq_losses = torch.sum(loss * mask, dim=-1)
    return torch.sum(seq_losses) / (scale_factor or mask.shape[-1])


def test_sum_norm_is_verls_actor_over_micro_batches():
    """verl's actor backs each micro-batch's agg_loss up weighted 1 / (micro-batches per
    rank): the micro-batches' mean, not the sequences' (which divided by 3 more here)."""
    loss, mask = _random_batch()
    chunks = [(loss[a:b], mask[a:b]) for a, b in ((0, 3), (3, 6))]
    scale = LossScale.of([m for _, m in chunks], norm_length=10, distributed=False)
    parts = sum(aggregate(part, m, "seq-mean-token-sum-norm", scale) for part, m in chunks)
    verl = sum(_verl_agg_loss_sum_norm(part, m, 10) / len(chunks) for part, m in chunks)
    torch.testing.assert_close(parts, verl)
    assert parts.item() == pytest.approx((loss * mask).sum().item() / 10 / 2)


def _rank_main(rank, world, results):
    loss, mask = _random_batch(rows=8, seed=3)
    out = {}
    for mode in LOSS_AGG_MODES:
        mine = [(loss[i : i + 2], mask[i : i + 2]) for i in range(rank * 4, rank * 4 + 4, 2)]
        scale = LossScale.of([m for _, m in mine])
        local = sum(aggregate(part, m, mode, scale) for part, m in mine)
        # Gradient reduction averages over ranks; the averaged loss must be the global one.
        dist.all_reduce(local, op=dist.ReduceOp.SUM)
        whole = aggregate(loss, mask, mode).item()
        if mode == "seq-mean-token-sum-norm":  # verl's mean over the 4 micro-batches
            whole /= 4
        out[mode] = (local / world).item(), whole, scale.dp_size
    results[rank] = out


def test_data_parallel_ranks_average_to_the_global_loss():
    results = mp.Manager().dict()
    run_distributed(_rank_main, 2, results)
    for rank in range(2):
        for mode, (averaged, global_value, dp_size) in results[rank].items():
            assert dp_size == 2
            assert averaged == pytest.approx(global_value, rel=1e-5), mode
