"""Run a function in N CPU processes joined by a gloo process group (as torchrun would).

Tests use real torch.distributed on CPU: FSDP2 over gloo writes the same DTensor
checkpoints Megatron-FSDP writes on GPUs, so the checkpoint layer is tested for real.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from trainer.distributed import free_port


def _entry(rank: int, world_size: int, port: int, fn: Callable, args: tuple) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
    )
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        fn(rank, world_size, *args)
        dist.barrier()  # no rank tears down while a peer still has work in flight with it
    finally:
        dist.destroy_process_group()
    _exit_without_teardown()


def _exit_without_teardown() -> None:
    """End a worker that finished cleanly without the interpreter's and C++ exit-time teardown.

    Once FSDP2 has run, destroy_process_group (and gc) leave the gloo group alive with its
    threads running: objects torch keeps for the life of the process (the device mesh, through
    DTensor's caches) still reference it. It is then destroyed during exit-time teardown,
    which can abort the worker ("terminate called without an active exception", SIGABRT: a
    std::thread still joinable when destroyed) and fail a test whose work passed. Results are
    already written by now, so the worker ends here, after flushing its output."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_distributed(fn: Callable[..., Any], world_size: int, *args: Any) -> None:
    """Call fn(rank, world_size, *args) in `world_size` spawned processes; raise if any fails."""
    mp.start_processes(
        _entry,
        args=(world_size, free_port(), fn, args),
        nprocs=world_size,
        start_method="spawn",
        join=True,
    )
