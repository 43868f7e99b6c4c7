"""Megatron-LM torch_dist saves whose distributed-optimizer state is in a flat form,
converted by Megatron-LM's `checkpoint_inspector.py convert-torch-dist-to-fsdp-dtensor`:
dp_reshardable's per-bucket buffers filed under the model entry (`model.module.optimizer
.distributed.dp_group_idx_0.gbuf_idx_0.dtype_(...).bucket_idx_0.exp_avg`, beside
`per_bucket_numel` objects), dp_zero_gather_scatter's pickled `param_state` object copied
unchanged (key names as a real megatron-core 0.19.2 save converted so holds them)."""

from __future__ import annotations

import io
from pathlib import Path

import torch

from tests.support.megatron_checkpoints import mcore_weights, megatron_args, megatron_run

BUCKET_KEY = (
    "optimizer.distributed.dp_group_idx_0.gbuf_idx_0.dtype_(torch.float32, torch.float32)"
    ".bucket_idx_0"
)
MISFILED = f"model.module.{BUCKET_KEY}"  # where the inspector puts the buffers
PARAM_STATE = "optimizer.distributed.dp_group_idx_0.param_state/shard_0_1"
FLAT_STATES = ("exp_avg", "exp_avg_sq", "param")


def dp_reshardable_converted(root: Path, model) -> Path:
    """A Megatron-LM run dir whose step holds `model`'s weights and one bucket of every
    weight's elements per state, as dp_reshardable saves it, converted."""
    numel = sum(w.numel() for w in mcore_weights(model).values())
    buffers = {f"module.{BUCKET_KEY}.{state}": torch.full((numel,), 0.25) for state in FLAT_STATES}

    def optimizer(_adam: dict) -> dict:  # objects only: the buffers sit in the model
        return {"distributed": {"dp_group_idx_0": {"per_bucket_numel/shard_0_1": [[numel]]}}}

    args = megatron_args(model, ckpt_format="torch_dist", optimizer="adam")
    return megatron_run(root, model, args, optimizer=optimizer, extra=buffers)


def pickled_buckets() -> io.BytesIO:
    """dp_zero_gather_scatter's ShardedObject: each bucket's states, saved as one blob."""
    blob = io.BytesIO()
    torch.save([{"exp_avg": torch.ones(3), "exp_avg_sq": torch.ones(3)}], blob)
    blob.seek(0)
    return blob


def dp_zero_gather_scatter_converted(root: Path, model) -> Path:
    """A Megatron-LM run dir whose step holds `model`'s weights and dp_zero_gather_scatter's
    ShardedObject (`pickled_buckets`), converted."""

    def optimizer(_adam: dict) -> dict:
        return {"distributed": {"dp_group_idx_0": {"param_state/shard_0_1": pickled_buckets()}}}

    args = megatron_args(model, ckpt_format="torch_dist", optimizer="adam")
    return megatron_run(root, model, args, optimizer=optimizer)
