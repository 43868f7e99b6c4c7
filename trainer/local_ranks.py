"""How many ranks `mfsdp train --nproc-per-node N` may start, checked before torchrun starts
any of them.

Every rank is a whole Python process that imports torch and builds the model, hundreds of MB
even for the tiny CPU model, so a mistyped count is costly before anything can fail: on a
2-core machine `--nproc-per-node 9999` launched 9999 of them, with only a note that ranks
take turns on a core. The rules, each a one-line usage error (exit 2) naming the flag:

- on CPU (gloo; `trainer.device=cpu`, or no GPU visible), at most `threads.cpu_rank_cap`: 4
  ranks per core this process may run on, or 8, whichever is more (more ranks than cores
  already only take turns on them, which `threads.oversubscribed` notes);
- on GPUs, one rank per visible GPU, as every rank checks again once torch has loaded
  (`trainer.distributed.check_gpus_for_local_ranks`), here before any process starts;
- in all, no more ranks than the rows of one global batch (`data.global_batch_size` rows
  for SFT, `data.train_batch_size` prompts for GRPO): the ranks past them would get no row
  to train on at any step.

None of this imports torch: the GPU count comes from the CUDA driver (`prerequisites`).
"""

from __future__ import annotations

from typing import Any

from trainer.config import ConfigError
from trainer.prerequisites import visible_cuda_devices
from trainer.threads import CPU_RANKS_RULE, available_cores, cpu_rank_cap

# The config key that holds a train command's rows per step, and what it counts
BATCH_ROWS = {
    "sft": ("data.global_batch_size", "rows"),
    "grpo": ("data.train_batch_size", "prompts"),
}


def gpu_rank_problem(local_ranks: int, visible: int) -> str | None:
    """Why `local_ranks` processes cannot each have one of `visible` GPUs, or None."""
    if local_ranks <= visible:
        return None
    return (
        f"--nproc-per-node {local_ranks}: only {visible} GPU(s) visible on this machine "
        "(one process per GPU)"
    )


def cpu_rank_problem(local_ranks: int, cores: int) -> str | None:
    """Why `local_ranks` processes are too many for a CPU machine's `cores`, or None."""
    cap = cpu_rank_cap(cores)
    if local_ranks <= cap:
        return None
    return (
        f"--nproc-per-node {local_ranks}: too many processes for this machine's {cores} CPU"
        f" core(s) (training on CPU: at most {cap}, {CPU_RANKS_RULE}; {cores} or fewer runs"
        " fastest)"
    )


def batch_rows_problem(subcommand: str, cfg: Any, per_node: int, nnodes: int) -> str | None:
    """Why `per_node` ranks on each of `nnodes` machines are more than the rows of one global
    batch, or None."""
    key, unit = BATCH_ROWS[subcommand]
    section, name = key.split(".")
    rows = getattr(getattr(cfg, section), name)
    ranks = per_node * nnodes
    if ranks <= rows:
        return None
    counted = f" x --nnodes {nnodes} = {ranks} ranks" if nnodes > 1 else ""
    return (
        f"--nproc-per-node {per_node}{counted}: more ranks than one global batch has {unit}"
        f" ({key}={rows}), so {ranks - rows} rank(s) would never get one to train on; start"
        f" at most {rows} ranks, or raise {key}"
    )


def check_local_ranks(subcommand: str, cfg: Any, per_node: int, nnodes: int = 1) -> None:
    """ConfigError (exit 2, one line) when the `per_node` ranks to start on this machine (of
    `nnodes`) are more than it can run (CPU cores, GPUs) or than one global batch has rows
    for; `subcommand`: `sft` or `grpo`, whose config `cfg` is."""
    visible = 0 if cfg.trainer.device == "cpu" else visible_cuda_devices()
    problem = (
        gpu_rank_problem(per_node, visible)
        if visible
        else cpu_rank_problem(per_node, len(available_cores()))
    ) or batch_rows_problem(subcommand, cfg, per_node, nnodes)
    if problem:
        raise ConfigError(problem)
