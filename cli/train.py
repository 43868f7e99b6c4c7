"""`mfsdp train sft`: supervised fine-tuning from a YAML config plus `key=value` overrides."""

from __future__ import annotations

from typing import Any

import click

from cli.errors import MfsdpGroup
from cli.launch import TRAIN_JSON, config_option, launch_options, run_command
from cli.run_report import FinalValue, final_value
from cli.train_grpo import grpo


@click.group(cls=MfsdpGroup, short_help="Train a model with SFT or GRPO.")
def train() -> None:
    """Train a model: supervised fine-tuning (sft) or reinforcement learning with GRPO (grpo).

    \b
    Examples:
      mfsdp train sft --config examples/sft_tiny_cpu.yaml trainer.total_steps=20
      mfsdp train grpo --config examples/grpo_tiny_cpu.yaml trainer.total_steps=20
    """


@train.command(
    context_settings={"ignore_unknown_options": False},
    short_help="Supervised fine-tuning (FSDP2 or Megatron-FSDP).",
)
@config_option("model, data, optim, strategy, checkpoint, trainer", "sft")
@launch_options
@TRAIN_JSON
@click.argument("overrides", nargs=-1)
def sft(config_path: str | None, as_json: bool, overrides: tuple[str, ...], **launch: Any) -> None:
    """Supervised fine-tuning with Megatron-FSDP (CUDA) or FSDP2 (anywhere).

    OVERRIDES are dotted `key=value` pairs applied over the YAML file, verl style; verl's own
    key names work too (docs/verl.md). Unknown keys are errors that name the closest valid
    keys. Resumes from the run directory's newest checkpoint unless checkpoint.resume=disable.

    \b
    Examples:
      mfsdp train sft --config examples/sft_tiny_cpu.yaml trainer.total_steps=20
      mfsdp train sft --config examples/sft_gsm8k_qwen.yaml --nproc-per-node 8
      mfsdp train sft --config examples/sft_gsm8k_qwen.yaml --nproc-per-node 8 \\
          --nnodes 2 --node-rank 0 --rdzv-endpoint node0:29500
    """
    from trainer.config import SFTConfig

    run_command("sft", SFTConfig, config_path, overrides, launch, as_json, train_sft)


def train_sft(cfg: Any) -> tuple[Any, list[FinalValue]]:
    """Run SFT (torch loads here, once the config passed) and name the values it reports."""
    from trainer.sft import run_sft

    result = run_sft(cfg)
    return result, [
        FinalValue("final_loss", "loss", final_value(result, result.losses, "train/loss"), ".4f"),
        FinalValue(
            "val_loss", "val loss", final_value(result, result.eval_losses, "val/loss"), ".4f"
        ),
    ]


train.add_command(grpo)

if __name__ == "__main__":
    from cli.main import command_ends_process
    from cli.std_streams import ensure_standard_streams

    ensure_standard_streams()  # a rank: before it opens a file or writes a line
    command_ends_process()
    train(prog_name="mfsdp train")
