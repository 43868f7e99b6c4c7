"""Gather the actor's sharded weights into full tensors, one at a time, for the rollout engine.

Both strategies shard each parameter along dim 0 over the data-parallel ranks in rank order;
FSDP2 evenly, Megatron-FSDP unevenly (a rank's shard may be empty). Gathering each rank's
rows with their sizes and concatenating them in rank order is exact for both, where
`DTensor.full_tensor()` assumes even shards. One tensor at a time keeps the extra memory to
the largest parameter. A LoRA actor's weights go out merged, under the base model's names
(`iter_merged_weights`), since the engine runs the base architecture.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, Shard

from trainer.lora import is_adapter_param


def full_tensor(value: Any) -> torch.Tensor:
    """The whole tensor on every rank (collective when `value` is a sharded DTensor)."""
    if not isinstance(value, DTensor):
        return value
    local = value.to_local().contiguous()
    sharded = [
        (mesh_dim, cast(Shard, p).dim)
        for mesh_dim, p in enumerate(value.placements)
        if p.is_shard()
    ]
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
    lengths = [int(s.item()) for s in sizes]
    padded_shape = list(local.shape)
    padded_shape[dim] = max(lengths)
    padded = local.new_zeros(padded_shape)
    padded.narrow(dim, 0, local.shape[dim]).copy_(local)
    pieces = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(pieces, padded, group=group)
    return torch.cat([piece.narrow(dim, 0, n) for piece, n in zip(pieces, lengths)], dim=dim)


def iter_full_weights(state_dict: dict[str, Any]) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, full tensor) in the state dict's order; every rank must consume the whole iterator."""
    for name, value in state_dict.items():
        if isinstance(value, torch.Tensor):
            yield name, full_tensor(value)


def iter_merged_weights(
    state_dict: dict[str, Any],
    scales: dict[str, tuple[str, float]],
    adapted_only: bool = False,
) -> Iterator[tuple[str, torch.Tensor]]:
    """A LoRA model's weights as the base model's: (name, full tensor) with each adapted
    linear merged, W + scale * B @ A (in fp32; the engine casts to its dtype), under the base
    model's names (`q_proj.base_layer.weight` -> `q_proj.weight`); adapter tensors are not sent.

    `scales` is `trainer.lora.lora_scales(model)`. With `adapted_only`, only the modules that
    sit next to an adapted linear are sent (for `q_proj`: every parameter of `self_attn`):
    an update changes the adapter alone, so once the engine holds the base, the embedding,
    norms and LM head it already has are still right and need no gather and no copy. Siblings
    go along because an engine may fuse them into one layer and reload such a layer only whole
    (vLLM's qkv_proj and gate_up_proj: loading q alone leaves k and v unset).
    Every rank must consume the whole iterator (the gathers are collective)."""
    unmatched = [module for module in scales if f"{module}.base_layer.weight" not in state_dict]
    if unmatched:  # names from another wrapper level: the push would skip the merge silently
        raise KeyError(f"weight push: no {unmatched[0]}.base_layer.weight in the model's state")
    parents = {module.rpartition(".")[0] for module in scales}
    for key, value in state_dict.items():
        if not isinstance(value, torch.Tensor) or is_adapter_param(key):
            continue
        name = key.replace(".base_layer.", ".")
        module = name.rpartition(".")[0]
        if adapted_only and module.rpartition(".")[0] not in parents:
            continue
        if module in scales and key.endswith(".base_layer.weight"):
            adapter, scale = scales[module]
            lora_a = full_tensor(state_dict[f"{module}.lora_A.{adapter}.weight"]).float()
            lora_b = full_tensor(state_dict[f"{module}.lora_B.{adapter}.weight"]).float()
            # out of place: on one rank full_tensor returns the parameter's own storage
            yield name, torch.addmm(full_tensor(value).float(), lora_b, lora_a, alpha=scale)
        else:
            yield name, full_tensor(value)
