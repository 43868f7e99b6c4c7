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
        ("seq-mean-token-sum-norm", (6 / 4 + 11 / 4) / 2),  # L = mask width 4
    ],
)
def test_modes_by_hand(mode, expected):
    assert aggregate(LOSS, MASK, mode).item() == pytest.approx(expected)


def test_sum_norm_uses_configured_length():
    scale = LossScale.local(MASK, norm_length=8)
    assert aggregate(LOSS, MASK, "seq-mean-token-sum-norm", scale).item() == pytest.approx(
        (6 / 8 + 11 / 8) / 2
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


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
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


def _rank_main(rank, world, results):
    loss, mask = _random_batch(rows=8, seed=3)
    out = {}
    for mode in LOSS_AGG_MODES:
        mine = [(loss[i : i + 2], mask[i : i + 2]) for i in range(rank * 4, rank * 4 + 4, 2)]
        scale = LossScale.of([m for _, m in mine])
        local = sum(aggregate(part, m, mode, scale) for part, m in mine)
        # Gradient reduction averages over ranks; the averaged loss must be the global one.
        dist.all_reduce(local, op=dist.ReduceOp.SUM)
        out[mode] = (local / world).item(), aggregate(loss, mask, mode).item(), scale.dp_size
    results[rank] = out


def test_data_parallel_ranks_average_to_the_global_loss():
    results = mp.Manager().dict()
    run_distributed(_rank_main, 2, results)
    for rank in range(2):
        for mode, (averaged, global_value, dp_size) in results[rank].items():
            assert dp_size == 2
            assert averaged == pytest.approx(global_value, rel=1e-5), mode
