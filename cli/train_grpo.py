"""`mfsdp train grpo`: GRPO with a colocated rollout engine (vLLM, or the built-in hf engine)."""

from __future__ import annotations

from typing import Any

import click

from cli.given_once import OnceCommand
from cli.launch import TRAIN_JSON, config_option, launch_options, run_command
from cli.run_report import FinalValue, final_value


@click.command(cls=OnceCommand, short_help="GRPO with a colocated rollout engine.")
@config_option(
    "model, data, actor, optim, strategy, rollout, algorithm, reward, checkpoint, trainer", "grpo"
)
@launch_options
@TRAIN_JSON
@click.argument("overrides", nargs=-1)
def grpo(config_path: str | None, as_json: bool, overrides: tuple[str, ...], **launch: Any) -> None:
    """GRPO: roll out n responses per prompt, score them with a rule or your reward function,
    and update the policy with group-relative advantages (verl's algorithm and names).

    OVERRIDES are dotted `key=value` pairs applied over the YAML file; verl's own key names
    work too (docs/verl.md). Resumes from the run directory's newest checkpoint unless
    checkpoint.resume=disable. Per-step metrics go to RUN_DIR/metrics.jsonl (and to the
    trackers in trainer.logger).

    \b
    Examples:
      mfsdp data synthetic --out runs/addition
      mfsdp train grpo --config examples/grpo_tiny_cpu.yaml trainer.total_steps=20
      mfsdp train grpo --config examples/grpo_gsm8k_qwen.yaml --nproc-per-node 8 \\
        model.path=/models/Qwen2.5-Math-7B
    """
    from trainer.grpo.config import GRPOConfig

    run_command("grpo", GRPOConfig, config_path, overrides, launch, as_json, train_grpo)


def train_grpo(cfg: Any) -> tuple[Any, list[FinalValue]]:
    """Run GRPO (torch loads here, once the config passed) and name the values it reports."""
    from trainer.grpo.runner import run_grpo

    result = run_grpo(cfg)
    return result, [
        FinalValue(
            "reward_mean", "reward", final_value(result, result.rewards, "reward/mean"), ".3f"
        ),
        FinalValue(
            "val_accuracy",
            "val accuracy",
            final_value(result, result.val_accuracy, "val/accuracy"),
            ".3f",
        ),
    ]
