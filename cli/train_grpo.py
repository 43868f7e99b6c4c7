"""`mfsdp train grpo`: GRPO with a colocated rollout engine (vLLM, or the built-in hf engine)."""

from __future__ import annotations

from typing import Any

import click

from cli.launch import (
    FinalValue,
    Launch,
    check_config,
    json_option,
    last_value,
    launch_options,
    report_run,
    start,
)


@click.command()
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="YAML config (sections model, data, actor, optim, strategy, rollout, algorithm, reward, "
    "checkpoint, trainer).",
)
@launch_options
@json_option
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

    cfg = check_config(GRPOConfig, config_path, list(overrides))
    start("grpo", cfg, Launch(**launch), config_path, as_json, list(overrides))
    run_grpo_command(cfg, as_json)


def run_grpo_command(cfg: Any, as_json: bool) -> None:
    from trainer.grpo.runner import run_grpo

    result = run_grpo(cfg)
    report_run(
        "grpo",
        result,
        as_json,
        [
            FinalValue("reward_mean", "reward", last_value(result.rewards), ".3f"),
            FinalValue("val_accuracy", "val accuracy", last_value(result.val_accuracy), ".3f"),
        ],
    )
