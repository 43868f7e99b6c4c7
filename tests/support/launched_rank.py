"""A two-rank program for tests of how `mfsdp train --nproc-per-node N` reports what its ranks
end with (a rank that stops while the others wait for it in a collective, an error every
rank meets alike, a result printed into a closed pipe): run under cli/torchrun.py with
`-m tests.support.launched_rank COMMAND ...`, errors handled as every mfsdp command handles
them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import click
import torch
import torch.distributed as dist

from cli.errors import MfsdpGroup, json_option
from mfsdp_ckpt.checkpoint_failures import raised_by_every_rank
from mfsdp_ckpt.checkpointer import load_checkpoint
from mfsdp_ckpt.errors import MfsdpFailedError
from mfsdp_ckpt.format.checkpoint_resolution import resolve_checkpoint
from trainer.distributed import init_distributed

JSON = json_option("Print a failure as {error, exit_code} on stdout.", expose_value=False)


def two_ranks_command(*args: str) -> list[str]:
    """cli/torchrun.py running this program with ARGS on two ranks, as the launching `mfsdp
    train --nproc-per-node 2` runs it (with `two_ranks_env`, from the repository root)."""
    command = [sys.executable, "-m", "cli.torchrun", "--standalone", "--nproc-per-node=2"]
    return [*command, "-m", "tests.support.launched_rank", *args]


def two_ranks_env() -> dict[str, str]:
    from cli.launch import CONFIG_CHECKED

    return {**os.environ, CONFIG_CHECKED: "1", "OMP_NUM_THREADS": "1"}


def run_two_ranks(*args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """`two_ranks_command(ARGS)` run to its end (under the command `prefix`, if any)."""
    from tests.support.paths import REPO

    return subprocess.run(
        [*prefix, *two_ranks_command(*args)],
        cwd=REPO,
        env=two_ranks_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


VLLM_REASON = "head_dim 16 is not one its CPU attention supports"


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
    init_distributed("cpu")  # as a training run joins its group
    # every rank connected to every other (gloo's full mesh) before one stops: a rank killed
    # while its peer still connects makes gloo log its own line, which a run that trained
    # a step never meets
    dist.barrier()
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
    init_distributed("cpu")  # as a training run joins its group
    if dist.get_rank() == late_rank:
        time.sleep(3)
    load_checkpoint(resolve_checkpoint(checkpoint), {"model": {}}, contents=("model",))


@ranks.command("loads-own")
@click.argument("checkpoints", nargs=-1, required=True)
@JSON
def loads_own(checkpoints: tuple[str, ...]) -> None:
    """Rank r loads `checkpoints[r]`'s model, as a resume does: one rank's copy may be refused
    while the others' load (a node whose copy of the checkpoint differs)."""
    init_distributed("cpu")  # as a training run joins its group
    checkpoint = checkpoints[dist.get_rank()]
    load_checkpoint(resolve_checkpoint(checkpoint), {"model": {}}, contents=("model",))
    dist.all_reduce(torch.ones(1))  # the run goes on together, as training would


@ranks.command("raises")
@click.argument("raising", type=int)
@JSON
def raises(raising: int) -> None:
    """Rank `raising` meets a bug of its own (not an mfsdp error) while the other waits for it."""
    init_distributed("cpu")  # as a training run joins its group
    if dist.get_rank() == raising:
        raise ValueError(own_failure(raising))
    dist.all_reduce(torch.ones(1))


@ranks.command("vllm-refuses")
@JSON
def vllm_refuses() -> None:
    """Every rank's vLLM engine refuses the model alike (a head_dim its kernels lack)."""
    from trainer.rollout.vllm_engine import VLLMRolloutError

    init_distributed("cpu")  # as a training run joins its group
    dist.all_reduce(torch.ones(1))  # and has trained together before its engine starts
    raise VLLMRolloutError.of(VLLM_REASON)


@ranks.command("reads-own")
@click.argument("files", nargs=-1, required=True)
@JSON
def reads_own(files: tuple[str, ...]) -> None:
    """Rank r reads `files[r]` where a resume reads its checkpoint's files (errors there are
    every rank's alike), then the run goes on together."""
    init_distributed("cpu")  # as a training run joins its group
    with raised_by_every_rank():
        Path(files[dist.get_rank()]).read_bytes()
    dist.all_reduce(torch.ones(1))


@ranks.command("waits")
@click.argument("pid_dir")
@JSON
def waits(pid_dir: str) -> None:
    """Each rank leaves its pid in `pid_dir`/RANK, then waits in a barrier no rank leaves: a
    test stops one rank with a signal."""
    init_distributed("cpu")  # as a training run joins its group
    pid_file = os.path.join(pid_dir, os.environ["RANK"])
    with open(pid_file + ".tmp", "w") as handle:
        handle.write(str(os.getpid()))
    os.replace(pid_file + ".tmp", pid_file)
    while True:
        time.sleep(0.1)


@ranks.command("prints-result")
@JSON
def prints_result() -> None:
    """Rank 0 prints the run's result on stdout, as a finished run does; the others print none."""
    if os.environ["RANK"] == "0":
        click.echo(json.dumps({"final_step": 1}))


if __name__ == "__main__":
    from cli.main import command_ends_process

    command_ends_process()  # as `python -m cli.train`, what a launched rank runs
    ranks(prog_name="launched_rank")
