"""Copy a state dict to host memory so an async save can write it while training goes on.

torch's own async staging rebuilds DTensors and drops what Megatron-FSDP attaches to
their local shards (`__create_chunk_list__` / `__create_write_items__`, which tell DCP
the true uneven chunk offsets): the save then fails with "Failed to validate global
plan". This stager keeps those hooks. Host buffers are pinned on CUDA and reused across
saves, so the training stall is one device-to-host copy, not an allocation; the price is
host memory the size of this rank's GPU shards, held between saves.

A staged DTensor is built directly on the source's spec with the host buffer as its local
shard. `DTensor.from_local` would instead rebuild the spec (slow: a cost paid per tensor,
which a model's many tensors add up to a stall at every save) and, the mesh being a CUDA
mesh, move the buffer back to the GPU.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.tensor import DTensor

_DCP_HOOKS = ("__create_chunk_list__", "__create_write_items__")


class HostStager:
    def __init__(self) -> None:
        self._buffers: dict[str, torch.Tensor] = {}

    def stage(self, state: Any, *, copy_host_tensors: bool) -> Any:
        """`state` with every tensor in host memory; call before training resumes.

        `copy_host_tensors=False` leaves tensors already on the host as they are (a
        synchronous save only needs device tensors moved); True snapshots them too (an
        async save must not see training's later updates)."""
        staged = self._copy("", state, copy_host_tensors)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return staged

    def _copy(self, key: str, value: Any, copy_host: bool) -> Any:
        if isinstance(value, dict):
            return {k: self._copy(f"{key}.{k}", v, copy_host) for k, v in value.items()}
        if isinstance(value, list):
            return [self._copy(f"{key}.{i}", v, copy_host) for i, v in enumerate(value)]
        if isinstance(value, torch.Tensor) and not value.is_cuda and not copy_host:
            return value
        if isinstance(value, DTensor):
            local = value._local_tensor
            buffer = self._host_copy(key, local)
            for hook in _DCP_HOOKS:  # the buffer is reused: drop a hook the source no longer has
                if hasattr(local, hook):
                    setattr(buffer, hook, getattr(local, hook))
                elif hasattr(buffer, hook):
                    delattr(buffer, hook)
            return DTensor(buffer, value._spec, requires_grad=False)
        if isinstance(value, torch.Tensor):
            return self._host_copy(key, value)
        return value

    def _host_copy(self, key: str, tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.detach()
        buffer = self._buffers.get(key)
        if buffer is None or buffer.shape != tensor.shape or buffer.dtype != tensor.dtype:
            pin = tensor.is_cuda
            buffer = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=pin)
            self._buffers[key] = buffer
        buffer.copy_(tensor, non_blocking=tensor.is_cuda)
        return buffer
