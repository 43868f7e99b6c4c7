"""Process group, device and mesh for one training run, in one process or under torchrun.

A lone process still gets a (world size 1) process group: the sharding strategies and the
checkpointer then take one code path whether a run has one rank or many.
"""

from __future__ import annotations

import datetime
import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

import torch
import torch.distributed as dist

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.errors import MfsdpFailedError, MfsdpUsageError
from trainer.closing import close_all
from trainer.config import ConfigError
from trainer.env_ints import env_int, joins_a_group
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
    """Join the group RANK/WORLD_SIZE describe (torchrun's, `_joined_store`) or start a
    single-rank group on a free port."""
    device_type = resolve_device(device_choice)
    local_rank = env_int("LOCAL_RANK", 0)
    if device_type == "cuda":
        check_gpus_for_local_ranks(env_int("LOCAL_WORLD_SIZE", 1, minimum=1))
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    global _started_a_group
    started = False
    if not dist.is_initialized():
        backend = "nccl" if device_type == "cuda" else "gloo"
        timeout = datetime.timedelta(minutes=timeout_minutes)
        if joins_a_group():
            store, rank, world_size = _joined_store()
            dist.init_process_group(
                backend,
                timeout=timeout,
                device_id=device if device_type == "cuda" else None,
                store=store,
                rank=rank,
                world_size=world_size,
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


JOIN_TIMEOUT_VARIABLE = "MFSDP_JOIN_TIMEOUT"  # seconds; the wait for the ranks, without torchrun
DEFAULT_JOIN_TIMEOUT = 300.0


def _joined_store() -> tuple[dist.Store | None, int, int]:
    """The store, rank and world size this process joins the group RANK and WORLD_SIZE
    describe with. Under torchrun (it sets TORCHELASTIC_RUN_ID) its env:// rendezvous, as it
    is: (None, -1, -1), torch's defaults (torchrun bounds its own wait). Otherwise (srun, a
    Kubeflow pod, or a stale `export RANK=0 WORLD_SIZE=2` left in the shell) the variables
    are checked first: without MASTER_ADDR or MASTER_PORT torch failed with a traceback, and
    with them a lone process waited the whole group timeout (30 minutes) for ranks that never
    came. This process says which variables made it join, and waits for the others at most
    `join_timeout()` seconds; the group forms as soon as all have joined."""
    if os.environ.get("TORCHELASTIC_RUN_ID"):
        return None, -1, -1
    rank, world_size, address, port = _group_variables()
    joined = f"RANK={rank} WORLD_SIZE={world_size} at MASTER_ADDR:MASTER_PORT={address}:{port}"
    waits = join_timeout()
    print(
        f"[mfsdp] joining a process group of {world_size} ranks from the environment ({joined},"
        f" not set by torchrun); waiting up to {waits:g} s ({JOIN_TIMEOUT_VARIABLE}) for the"
        " others",
        file=sys.stderr,
        flush=True,
    )
    try:
        store = dist.TCPStore(
            address,
            port,
            world_size,
            is_master=rank == 0,
            timeout=datetime.timedelta(seconds=waits),
            wait_for_workers=True,
        )
    except (RuntimeError, OSError) as err:  # torch's DistStoreError / DistNetworkError
        cause = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise MfsdpFailedError(
            f"{joined}: the other ranks did not join within {waits:g} s ({cut_to(cause, 160)});"
            " these variables made this process join a group of that many: unset them or start the"
            " other ranks (mfsdp --nproc-per-node N starts them itself)"
        ) from None
    return store, rank, world_size


def join_timeout() -> float:
    """Seconds a process that RANK and WORLD_SIZE make join a group (not under torchrun) waits
    for the other ranks: MFSDP_JOIN_TIMEOUT, else 5 minutes (slow starts of many nodes may
    need more)."""
    given = os.environ.get(JOIN_TIMEOUT_VARIABLE, "")
    try:
        seconds = float(given) if given else DEFAULT_JOIN_TIMEOUT
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < float("inf"):
        raise MfsdpUsageError(f"{JOIN_TIMEOUT_VARIABLE}={given}: give a number of seconds > 0")
    return seconds


def _group_variables() -> tuple[int, int, str, int]:
    """RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, checked: a missing or malformed one is
    a usage error naming the variables set and those missing."""
    names = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    given = {name: os.environ.get(name, "") for name in names}
    set_ = " ".join(f"{name}={value}" for name, value in given.items() if value)
    missing = [name for name, value in given.items() if not value]
    if missing:
        raise MfsdpUsageError(
            f"{set_} set but not {' and '.join(missing)}: a process group of WORLD_SIZE ranks"
            " needs all four (torchrun sets them); unset these to train in one process, or"
            " use mfsdp's --nproc-per-node to start the ranks"
        )
    try:
        rank, world_size, port = (
            int(given[name]) for name in ("RANK", "WORLD_SIZE", "MASTER_PORT")
        )
    except ValueError:
        rank, world_size, port = -1, 0, 0
    if not (0 <= rank < world_size and 0 < port < 65536):
        raise MfsdpUsageError(
            f"{set_}: RANK must be 0..WORLD_SIZE-1 and MASTER_PORT a port (1..65535)"
        )
    return rank, world_size, given["MASTER_ADDR"], port


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
    except BaseException as err:
        close_all([lambda: shutdown(env)], err)  # a failing teardown never hides the run's error
        raise
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
