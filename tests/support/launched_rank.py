"""A two-rank program for tests of how `mfsdp train --nproc-per-node N` reports what its ranks
end with (a rank that stops while the others wait for it in a collective, an error every
rank meets alike, a result printed into a closed pipe): run under cli/torchrun.py with
`-m tests.support.launched_rank COMMAND ...`, errors handled as every mfsdp command handles
them."""

from __future__ import annotations

import json
import os
import signal
import time

import click
import torch
import torch.distributed as dist

from cli.errors import MfsdpGroup, json_option
from mfsdp_ckpt.checkpointer import load_checkpoint
from mfsdp_ckpt.errors import MfsdpFailedError
from mfsdp_ckpt.format.checkpoint_resolution import resolve_checkpoint

JSON = json_option("Print a failure as {error, exit_code} on stdout.", expose_value=False)


def own_failure(rank: int) -> str:
    return f"step 3: rank {rank}'s own failure"


@click.group(cls=MfsdpGroup)
def ranks() -> None:
    """Ranks that join a gloo group, then stop in one of the ways below."""


@ranks.command("one-stops")
@click.argument("stopping", type=int)
@click.argument("how", type=click.Choice(["fails", "is-killed"]))
@JSON
def one_stops(stopping: int, how: str) -> None:
    """Rank `stopping` fails (or is killed) while the other waits for it in an all-reduce."""
    dist.init_process_group("gloo")
    if dist.get_rank() == stopping:
        if how == "is-killed":  # as the out-of-memory killer does
            os.kill(os.getpid(), signal.SIGKILL)
        raise MfsdpFailedError(own_failure(stopping))
    dist.all_reduce(torch.ones(1))  # the stopping rank never joins it


@ranks.command("loads")
@click.argument("checkpoint")
@click.option("--late-rank", type=int, help="This rank starts loading a few seconds after.")
@JSON
def loads(checkpoint: str, late_rank: int | None) -> None:
    """Every rank loads `checkpoint`'s model into an empty state, as a resume does; with
    `--late-rank`, one rank gets there once the others may have ended (torchrun then stops it)."""
    dist.init_process_group("gloo")
    if dist.get_rank() == late_rank:
        time.sleep(3)
    load_checkpoint(resolve_checkpoint(checkpoint), {"model": {}}, contents=("model",))


@ranks.command("prints-result")
@JSON
def prints_result() -> None:
    """Rank 0 prints the run's result on stdout, as a finished run does; the others print none."""
    if os.environ["RANK"] == "0":
        click.echo(json.dumps({"final_step": 1}))


if __name__ == "__main__":
    ranks(prog_name="launched_rank")
