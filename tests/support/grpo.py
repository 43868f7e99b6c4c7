"""The smallest GRPO runs tests train: verl RL rows and a config of a few tokens a step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.data_tables import read_rows, write_parquet
from trainer.config import load_config
from trainer.grpo.config import GRPOConfig


def write_rl_rows(path: Path, rows: int = 8, prefix: str = "") -> Path:
    """verl RL rows as jsonl, each prompt `prefix` + an addition question."""
    with open(path, "w") as handle:
        for i in range(rows):
            question = f"{prefix}What is {i} + {i + 3}?"
            row = {
                "prompt": [{"role": "user", "content": question}],
                "data_source": "openai/gsm8k",
                "reward_model": {"ground_truth": str(2 * i + 3)},
                "extra_info": {"index": i},
            }
            handle.write(json.dumps(row) + "\n")
    return path


# prompt and response lengths the tiny model takes
SMALL_LENGTHS = ("data.max_prompt_length=32", "rollout.max_response_length=16")


def changed_rl_rows(tmp_path: Path, **change: Any) -> list[dict]:
    """`write_rl_rows`' rows as read back, each with the columns `change` set."""
    return [{**row, **change} for row in read_rows(str(write_rl_rows(tmp_path / "r.jsonl")))]


def write_rl_table(rows: list[dict], path: Path) -> Path:
    """`rows` written to `path`, a parquet file or else jsonl, as its suffix says."""
    if path.suffix == ".parquet":
        return write_parquet(rows, path)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def grpo_config(data: Path, run: Path, *overrides: str) -> GRPOConfig:
    """The smallest GRPO run that trains: 2 prompts x 2 responses of 4 tokens a step."""
    return load_config(
        GRPOConfig,
        None,
        [
            f"data.train_files={data}",
            "data.max_prompt_length=32",
            "data.train_batch_size=2",
            "actor.ppo_mini_batch_size=2",
            "actor.ppo_micro_batch_size_per_gpu=4",
            "actor.log_prob_micro_batch_size_per_gpu=4",
            "rollout.n=2",
            "rollout.max_response_length=4",
            "rollout.name=hf",
            "trainer.total_steps=2",
            f"trainer.run_dir={run}",
            "trainer.progress_bar=false",
            "trainer.device=cpu",
            "strategy.name=fsdp2",
            "checkpoint.save_every=1",
            *overrides,
        ],
    )
