"""`mfsdp train grpo`: GRPO with a colocated rollout engine (vLLM, or the built-in hf engine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import click

from cli.errors import friendly_errors


def _usage_errors() -> tuple[type[BaseException], ...]:
    from mfsdp_ckpt.checkpointer import CheckpointContentsError
    from mfsdp_ckpt.layout import CheckpointPathError
    from trainer.config import ConfigError
    from trainer.data.files import DataFileError
    from trainer.grpo.data import RLDataError
    from trainer.rewards.custom import RewardError
    from trainer.sft import ResumeMismatchError

    return (ConfigError, DataFileError, RLDataError, RewardError, CheckpointPathError, CheckpointContentsError,
            ResumeMismatchError)


@click.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="YAML config (sections model, data, actor, optim, strategy, rollout, algorithm, reward, "
                   "checkpoint, trainer).")
@click.option("--nproc-per-node", type=int, default=1, show_default=True,
              help="Start this many processes on this machine through torchrun (one per GPU).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.argument("overrides", nargs=-1)
def grpo(config_path: str | None, nproc_per_node: int, as_json: bool, overrides: tuple[str, ...]) -> None:
    """GRPO: roll out n responses per prompt, score them with a rule or your reward function,
    and update the policy with group-relative advantages (verl's algorithm and names).

    OVERRIDES are dotted `key=value` pairs applied over the YAML file. Resumes from the run
    directory's newest checkpoint unless checkpoint.resume=disable. Per-step metrics go to
    RUN_DIR/metrics.jsonl.

    \b
    Examples:
      python -m trainer.grpo.synthetic runs/addition
      mfsdp train grpo --config examples/grpo_tiny_cpu.yaml trainer.total_steps=20
      mfsdp train grpo --config examples/grpo_gsm8k_qwen.yaml --nproc-per-node 8 model.path=/models/Qwen2.5-Math-7B
    """
    command = friendly_errors(usage=_usage_errors(), failure=(FloatingPointError,))(run_grpo_command)
    command(config_path, nproc_per_node, as_json, list(overrides))


def run_grpo_command(config_path: str | None, nproc_per_node: int, as_json: bool, overrides: list[str]) -> None:
    from trainer.config import ConfigError, load_config
    from trainer.grpo.config import GRPOConfig

    cfg = load_config(GRPOConfig, config_path, overrides)  # validate before starting any process
    if nproc_per_node < 1:
        raise ConfigError("--nproc-per-node must be >= 1")
    if nproc_per_node > 1 and "RANK" not in os.environ:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc_per_node}",
                   "-m", "cli.train_grpo"] + (["--config", config_path] if config_path else [])
        sys.exit(subprocess.call(command + (["--json"] if as_json else []) + overrides))
    from trainer.grpo.runner import run_grpo

    result = run_grpo(cfg)
    if int(os.environ.get("RANK", 0)) != 0:
        return
    last = result.rewards[max(result.rewards)] if result.rewards else None
    summary = {
        "run_dir": str(result.run_dir),
        "final_step": result.final_step,
        "resumed_from": result.resumed_from,
        "reward_mean": last,
        "val_accuracy": result.val_accuracy[max(result.val_accuracy)] if result.val_accuracy else None,
        "checkpoint": str(result.last_checkpoint) if result.last_checkpoint else None,
    }
    if as_json:
        click.echo(json.dumps(summary))
    else:
        shown = f", reward {last:.3f}" if last is not None else ""
        shown += f", val accuracy {summary['val_accuracy']:.3f}" if summary["val_accuracy"] is not None else ""
        click.echo(f"grpo: step {result.final_step}{shown}; checkpoint {summary['checkpoint']}")


if __name__ == "__main__":
    grpo(prog_name="mfsdp train grpo")
