"""Gather the actor's sharded weights into full tensors, one at a time, for the rollout engine.

Both strategies shard each parameter along dim 0 over the data-parallel ranks in rank order;
FSDP2 evenly, Megatron-FSDP unevenly (a rank's shard may be empty). Gathering each rank's
rows with their sizes and concatenating them in rank order is exact for both, where
`DTensor.full_tensor()` assumes even shards. One tensor at a time keeps the extra memory to
the largest parameter.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor


def full_tensor(value: Any) -> torch.Tensor:
    """The whole tensor on every rank (collective when `value` is a sharded DTensor)."""
    if not isinstance(value, DTensor):
        return value
    local = value.to_local().contiguous()
    sharded = [(mesh_dim, p.dim) for mesh_dim, p in enumerate(value.placements) if p.is_shard()]
    if not sharded:
        return local
    if len(sharded) > 1:
        raise ValueError(f"cannot gather a tensor sharded over {len(sharded)} mesh dimensions")
    mesh_dim, dim = sharded[0]
    group = value.device_mesh.get_group(mesh_dim)
    world = dist.get_world_size(group)
    if world == 1:
        return local
    size = torch.tensor([local.shape[dim]], dtype=torch.long, device=local.device)
    sizes = [torch.zeros_like(size) for _ in range(world)]
    dist.all_gather(sizes, size, group=group)
    sizes = [int(s.item()) for s in sizes]
    padded_shape = list(local.shape)
    padded_shape[dim] = max(sizes)
    padded = local.new_zeros(padded_shape)
    padded.narrow(dim, 0, local.shape[dim]).copy_(local)
    pieces = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(pieces, padded, group=group)
    return torch.cat([piece.narrow(dim, 0, n) for piece, n in zip(pieces, sizes)], dim=dim)


def iter_full_weights(state_dict: dict[str, Any]) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, full tensor) in the state dict's order; every rank must consume the whole iterator."""
    for name, value in state_dict.items():
        if isinstance(value, torch.Tensor):
            yield name, full_tensor(value)
