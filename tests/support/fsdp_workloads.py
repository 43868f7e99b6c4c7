"""Tiny FSDP2 training workloads that save and load through the checkpoint layer.

Each function runs inside `run_distributed` (or in one plain process with rank 0 and no
process group) and writes what it saw to a file, so the test process can compare.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from transformers import Qwen2Config, Qwen2ForCausalLM

from mfsdp_ckpt.checkpointer import Checkpointer, load_checkpoint
from mfsdp_ckpt.format import checkpoint_resolution
from trainer.state import ModelState, OptimizerState
from trainer.tiny import tiny_config_kwargs

VOCAB = 96


def tiny_config() -> Qwen2Config:
    kwargs = tiny_config_kwargs(VOCAB)
    kwargs.update(
        hidden_size=64, intermediate_size=96, num_attention_heads=2, num_key_value_heads=1
    )
    return Qwen2Config(**kwargs)


def build(sharded: bool) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(tiny_config())
    if sharded:
        for block in model.model.layers:
            fully_shard(block)
        fully_shard(model)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def train(model, optimizer, steps: int, seed: int = 1) -> list[float]:
    generator = torch.Generator().manual_seed(
        seed + (dist.get_rank() if dist.is_initialized() else 0)
    )
    losses = []
    for _ in range(steps):
        batch = torch.randint(0, VOCAB, (2, 12), generator=generator)
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def full_state(model, optimizer) -> dict[str, torch.Tensor]:
    """Every model and optimizer tensor as a full (unsharded) tensor, keyed like the checkpoint."""
    states = {
        "model": ModelState(model).state_dict(),
        "optimizer": OptimizerState(model, optimizer).state_dict(),
    }
    flat = {}

    def visit(prefix: str, value) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                visit(f"{prefix}.{key}" if prefix else str(key), item)
        elif isinstance(value, DTensor):
            flat[prefix] = value.full_tensor().detach().clone()
        elif isinstance(value, torch.Tensor):
            flat[prefix] = value.detach().clone()

    visit("", states)
    return flat


def states_of(model, optimizer, step: int) -> dict:
    rank = dist.get_rank() if dist.is_initialized() else 0
    return {
        "model": ModelState(model),
        "optimizer": OptimizerState(model, optimizer),
        "extra": {"step": step, f"rng_rank{rank}": torch.get_rng_state()},
    }


def train_and_save(
    rank: int, world_size: int, run_dir: str, steps: int, out: str, async_save: bool = False
) -> None:
    model, optimizer = build(sharded=world_size > 1)
    train(model, optimizer, steps)
    state = full_state(model, optimizer)
    checkpointer = Checkpointer(run_dir, strategy="fsdp2", keep_last=2, async_save=async_save)
    checkpointer.save(
        steps,
        states_of(model, optimizer, steps),
        hf_assets=lambda d: tiny_config().save_pretrained(d),
    )
    if async_save:  # training goes on while the save is written: it must not leak into it
        train(model, optimizer, 2, seed=50)
    checkpointer.close()
    if rank == 0:
        torch.save(state, out)


def save_twice_async(rank: int, world_size: int, run_dir: str, out: str) -> None:
    """Two async saves in a row: the second reuses the first one's host buffers, and each
    checkpoint must hold the values of its own step."""
    model, optimizer = build(sharded=world_size > 1)
    checkpointer = Checkpointer(run_dir, strategy="fsdp2", keep_last=2, async_save=True)
    states = []
    for step in (1, 2):
        train(model, optimizer, 1, seed=step)
        states.append(full_state(model, optimizer))
        checkpointer.save(step, states_of(model, optimizer, step))
    train(model, optimizer, 1, seed=9)  # training goes on while step 2 is written
    checkpointer.close()
    if rank == 0:
        torch.save(states, out)


def load_and_dump(rank: int, world_size: int, path: str, out: str) -> None:
    model, optimizer = build(sharded=world_size > 1)
    train(model, optimizer, 1, seed=99)  # different values and initialized optimizer state
    extra: dict = {"step": -1, f"rng_rank{rank}": torch.get_rng_state()}
    load_checkpoint(
        checkpoint_resolution.resolve_checkpoint(path),
        {**states_of(model, optimizer, 0), "extra": extra},
    )
    state = full_state(model, optimizer)
    state["extra.step"] = torch.tensor(extra["step"])
    if rank == 0:
        torch.save(state, out)


def run_single(fn, *args) -> None:
    """Run a workload in this process with no process group (rank 0 of 1)."""
    fn(0, 1, *args)


def uneven_rows(rank: int) -> tuple[int, int]:
    """Megatron-FSDP-style split of a 10-row tensor: rank 0 holds 7 rows, rank 1 holds 3."""
    return (0, 7) if rank == 0 else (7, 3)


def save_uneven_dtensor(rank: int, world_size: int, run_dir: str, async_save: bool) -> None:
    """Attach true chunk offsets to local shards as the Megatron-FSDP strategy does, then save."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard

    from mfsdp_ckpt.storage.uneven_chunks import attach_uneven_chunk_metadata

    mesh = init_device_mesh("cpu", (world_size,))
    start, rows = uneven_rows(rank)
    full = torch.arange(40, dtype=torch.float32).reshape(10, 4)
    local = full[start : start + rows].clone()
    tensor = DTensor.from_local(
        local, mesh, [Shard(0)], shape=full.shape, stride=full.stride(), run_check=False
    )
    attach_uneven_chunk_metadata({"w": tensor})
    checkpointer = Checkpointer(run_dir, strategy="megatron_fsdp", async_save=async_save)
    checkpointer.save(1, {"model": {"w": tensor}}, contents=("model",))
    local.add_(1000)  # training moves on; an async save must hold the values at save time
    checkpointer.close()
