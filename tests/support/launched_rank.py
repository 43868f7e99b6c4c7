"""A two-rank program for tests of how `mfsdp train --nproc-per-node N` reports a rank that
stops while the others wait for it in a collective: run under cli/torchrun.py with
`-m tests.support.launched_rank HOW`, errors handled as every mfsdp command handles them."""

from __future__ import annotations

import os
import signal

import click
import torch
import torch.distributed as dist

from cli.errors import MfsdpGroup, remember_json
from mfsdp_ckpt.errors import MfsdpFailedError


def own_failure(rank: int) -> str:
    return f"step 3: rank {rank}'s own failure"


@click.group(cls=MfsdpGroup)
def ranks() -> None:
    """Ranks that join a gloo group, then rank 0 stops first."""


@ranks.command("one-stops")
@click.argument("stopping", type=int)
@click.argument("how", type=click.Choice(["fails", "is-killed"]))
@click.option("--json", "as_json", is_flag=True, expose_value=False, callback=remember_json)
def one_stops(stopping: int, how: str) -> None:
    """Rank `stopping` fails (or is killed) while the other waits for it in an all-reduce."""
    dist.init_process_group("gloo")
    if dist.get_rank() == stopping:
        if how == "is-killed":  # as the out-of-memory killer does
            os.kill(os.getpid(), signal.SIGKILL)
        raise MfsdpFailedError(own_failure(stopping))
    dist.all_reduce(torch.ones(1))  # the stopping rank never joins it


if __name__ == "__main__":
    ranks(prog_name="launched_rank")
