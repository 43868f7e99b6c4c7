"""The whole numbers torchrun and job systems pass in the environment (RANK, LOCAL_RANK,
LOCAL_WORLD_SIZE), read in one way.

A bare `int(os.environ.get("RANK", 0))` was a traceback (`invalid literal for int() with
base 10: ''`) for an empty or misspelled value, which a job script's
`export LOCAL_WORLD_SIZE=$SLURM_NTASKS_PER_NODE` gives when its variable is unset: the
variable and its value are named instead, as a usage mistake.
"""

from __future__ import annotations

import os

from mfsdp_ckpt.errors import MfsdpUsageError


def env_int(name: str, default: int, minimum: int = 0) -> int:
    """Environment variable `name` as a whole number of at least `minimum`, `default` when it
    is not set; any other value (empty included) raises one line naming it."""
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        number = int(value.strip()) if value.strip().isascii() else None
    except ValueError:
        number = None
    if number is None or number < minimum:
        raise MfsdpUsageError(
            f"environment variable {name}={value!r}: not a whole number >= {minimum};"
            " unset it or give one (torchrun sets it for each rank)"
        )
    return number


def joins_a_group() -> bool:
    """Whether this process trains as one rank of a group its launcher set up: RANK and
    WORLD_SIZE both set (torchrun, srun; `trainer.distributed` joins it). With RANK alone
    it trains alone, as rank 0 of a group of one."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def process_rank() -> int:
    """The rank this process trains as: RANK (`env_int`) where it joins a group, else 0.
    Read here for every "rank 0 alone" decision: `RANK=1` without WORLD_SIZE trained alone
    and printed no result, and RANK compared as text made `RANK=00` rank 0 to some parts of
    a run and not to others."""
    return env_int("RANK", 0) if joins_a_group() else 0
