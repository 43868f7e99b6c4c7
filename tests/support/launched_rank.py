"""A two-rank program for tests of how `mfsdp train --nproc-per-node N` reports a rank that
stops while the others wait for it in a collective: run under cli/torchrun.py with
`-m tests.support.launched_rank HOW`, errors handled as every mfsdp command handles them."""

from __future__ import annotations

import os
import signal

import click
import torch
import torch.distributed as dist

from cli.errors import MfsdpGroup
from mfsdp_ckpt.errors import MfsdpFailedError

RANK_0_FAILURE = "step 3: rank 0's own failure"


@click.group(cls=MfsdpGroup)
def ranks() -> None:
    """Ranks that join a gloo group, then rank 0 stops first."""


@ranks.command("rank-0-stops")
@click.argument("how", type=click.Choice(["fails", "is-killed"]))
def rank_0_stops(how: str) -> None:
    """Rank 0 fails (or is killed) while rank 1 waits for it in an all-reduce."""
    dist.init_process_group("gloo")
    if dist.get_rank() == 0:
        if how == "is-killed":  # as the out-of-memory killer does
            os.kill(os.getpid(), signal.SIGKILL)
        raise MfsdpFailedError(RANK_0_FAILURE)
    dist.all_reduce(torch.ones(1))  # rank 0 never joins it


if __name__ == "__main__":
    ranks(prog_name="launched_rank")
