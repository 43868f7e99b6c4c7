"""Process group, device and mesh for one training run, in one process or under torchrun.

A lone process still gets a (world size 1) process group: the sharding strategies and the
checkpointer then take one code path whether a run has one rank or many.
"""

from __future__ import annotations

import datetime
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

import torch
import torch.distributed as dist

from trainer.config import ConfigError
from trainer.local_ranks import gpu_rank_problem

Number = TypeVar("Number", int, float)


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    started_group: bool  # this call created the process group, so teardown destroys it

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def resolve_device(choice: str) -> str:
    """`auto`: cuda when a GPU is visible, else cpu."""
    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            "trainer.device=cuda but no CUDA device is visible "
            "(trainer.device=cpu, or auto, trains on CPU)"
        )
    return choice


def check_gpus_for_local_ranks(local_ranks: int) -> None:
    """One GPU per process: more local ranks than visible GPUs is a usage mistake, said the
    same way by every rank (not torch's `invalid device ordinal` on the ranks past the end)."""
    problem = gpu_rank_problem(local_ranks, torch.cuda.device_count())
    if problem:
        raise ConfigError(problem)


# Whether a process group was started in this process: a command ending the process once it
# failed then exits without the interpreter's teardown (cli/errors.py `_exit`).
_started_a_group = False


def started_a_group() -> bool:
    """Whether `init_distributed` started a process group in this process (since destroyed
    or not): the teardown of such a process, after a run failed with its objects still
    referenced by the error, sometimes aborted ("terminate called without an active
    exception", exit -6 under the error line)."""
    return _started_a_group


def init_distributed(device_choice: str = "auto", timeout_minutes: int = 30) -> DistEnv:
    """Join torchrun's group (RANK/WORLD_SIZE set) or start a single-rank group on a free port."""
    device_type = resolve_device(device_choice)
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if device_type == "cuda":
        check_gpus_for_local_ranks(int(os.environ.get("LOCAL_WORLD_SIZE", 1)))
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    global _started_a_group
    started = False
    if not dist.is_initialized():
        backend = "nccl" if device_type == "cuda" else "gloo"
        timeout = datetime.timedelta(minutes=timeout_minutes)
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            dist.init_process_group(
                backend, timeout=timeout, device_id=device if device_type == "cuda" else None
            )
        else:
            dist.init_process_group(
                backend,
                init_method=f"tcp://127.0.0.1:{free_port()}",
                rank=0,
                world_size=1,
                timeout=timeout,
            )
        started = _started_a_group = True
    return DistEnv(dist.get_rank(), dist.get_world_size(), local_rank, device, started)


def shutdown(env: DistEnv) -> None:
    if env.started_group and dist.is_initialized():
        dist.destroy_process_group()


@contextmanager
def distributed_run(device_choice: str = "auto") -> Iterator[DistEnv]:
    """`init_distributed` for the length of a run; the group it started is destroyed even when
    the run fails, so a caller (a test, a notebook) can start the next run in the same process."""
    env = init_distributed(device_choice)
    try:
        yield env
    finally:
        shutdown(env)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def all_reduce_sum(values: list[float], device: torch.device) -> list[float]:
    """Sum a few scalars over all ranks in one collective (float64, so token counts stay exact)."""
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(tensor)
    return tensor.tolist()


def all_reduce_max(value: Number, device: torch.device) -> Number:
    """The largest `value` over all ranks, of the type given (float64 on the wire, like
    `all_reduce_sum`: exact for any count a run holds)."""
    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return type(value)(tensor.item())
