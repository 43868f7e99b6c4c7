"""Gradient clipping over FSDP2-sharded gradients on 2 CPU ranks (gloo) equals the unsharded
norm."""

import copy

import torch
import torch.distributed as dist

from tests.support.distributed import run_distributed
from trainer.optim import clip_grad_norm


def _clip_sharded_vs_unsharded(rank: int, world_size: int) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    # dim 0 sizes 5 and 3: uneven shards over 2 ranks, one rank's bias shard has 1 element
    reference = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
    sharded = copy.deepcopy(reference)
    mesh = init_device_mesh("cpu", (world_size,))
    for layer in (sharded[0], sharded[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(sharded, mesh=mesh)
    inputs = torch.randn(4, 6, generator=torch.Generator().manual_seed(1))  # same on every rank
    for model in (reference, sharded):
        (model(inputs).pow(2).sum() * 10).backward()
    expected = float(torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.5))
    got = clip_grad_norm(list(sharded.parameters()), 0.5, torch.device("cpu"))
    assert abs(got - expected) <= 1e-5 * expected, (got, expected)
    assert expected > 0.5  # clipping really happened
    for ours, theirs in zip(sharded.parameters(), reference.parameters()):
        torch.testing.assert_close(ours.grad.full_tensor(), theirs.grad, rtol=1e-5, atol=1e-7)
    dist.barrier()


def test_clip_grad_norm_sharded_equals_unsharded():
    run_distributed(_clip_sharded_vs_unsharded, 2)
