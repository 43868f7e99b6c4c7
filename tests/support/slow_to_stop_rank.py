"""A two-rank program for tests of a rank interrupted alone: run under cli/torchrun.py with
`-m tests.support.slow_to_stop_rank PID_DIR`. Each rank leaves its pid in PID_DIR/RANK and
all-reduces until stopped; a rank that gets Ctrl-C closes its connections at once and then
takes a while to exit, as a training rank does (its process group is destroyed as the
run's block ends; torch's exit handlers take seconds), so the ranks waiting for it lose
contact and end before it does."""

from __future__ import annotations

import os
import time

import click
import torch
import torch.distributed as dist

from cli.errors import MfsdpGroup, json_option
from trainer.distributed import init_distributed

SLOW_EXIT_SECONDS = 3.0


@click.group(cls=MfsdpGroup)
def ranks() -> None:
    """Ranks that join a gloo group, then all-reduce until one is stopped."""


@ranks.command("all-reduce")
@click.argument("pid_dir")
@json_option("Print a failure as {error, exit_code} on stdout.", expose_value=False)
def all_reduce(pid_dir: str) -> None:
    """Leave this rank's pid in `pid_dir`/RANK, then all-reduce until stopped."""
    init_distributed("cpu")  # as a training run joins its group
    pid_file = os.path.join(pid_dir, os.environ["RANK"])
    with open(pid_file + ".tmp", "w") as handle:
        handle.write(str(os.getpid()))
    os.replace(pid_file + ".tmp", pid_file)
    try:
        while True:
            dist.all_reduce(torch.ones(1))
            time.sleep(0.01)
    except KeyboardInterrupt:
        dist.destroy_process_group()
        time.sleep(SLOW_EXIT_SECONDS)
        raise


if __name__ == "__main__":
    from cli.main import command_ends_process

    command_ends_process()  # as `python -m cli.train`, what a launched rank runs
    ranks(prog_name="slow_to_stop_rank")
