"""What every `mfsdp train` command does around its runner: start ranks, report the result.

`mfsdp train sft|grpo --nproc-per-node N` runs the same subcommand again under
`torch.distributed.run --standalone`; each rank then finds RANK set and trains instead of
launching again. One module, so every training command starts its ranks and prints its
summary the same way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import click


def launch_if_needed(subcommand: str, config_path: str | None, nproc_per_node: int, as_json: bool,
                     overrides: list[str]) -> None:
    """Return when this process should train; with N > 1 and no torchrun yet, run N ranks and exit.

    The parent exits with torchrun's status, so a failed rank fails the command.
    """
    from trainer.config import ConfigError

    if nproc_per_node < 1:
        raise ConfigError("--nproc-per-node must be >= 1")
    if nproc_per_node > 1 and "RANK" not in os.environ:
        sys.exit(subprocess.call(torchrun_command(subcommand, config_path, nproc_per_node, as_json, overrides)))


def torchrun_command(subcommand: str, config_path: str | None, nproc_per_node: int, as_json: bool,
                     overrides: list[str]) -> list[str]:
    """`python -m torch.distributed.run ... -m cli.train SUBCOMMAND [--config F] [--json] OVERRIDES`."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc_per_node}",
               "-m", "cli.train", subcommand]
    if config_path:
        command += ["--config", config_path]
    if as_json:
        command.append("--json")
    return command + list(overrides)


def report(summary: dict[str, Any], as_json: bool, line: str) -> None:
    """Print a finished run's summary once, from rank 0 (torchrun sets RANK; a lone process has
    none): as one JSON object with --json, else as `line`."""
    if int(os.environ.get("RANK", 0)) != 0:
        return
    click.echo(json.dumps(summary) if as_json else line)


def last_value(by_step: dict[int, float]) -> float | None:
    """The newest step's value of a per-step series, None when the run logged none."""
    return by_step[max(by_step)] if by_step else None
