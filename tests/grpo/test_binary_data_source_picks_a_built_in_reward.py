"""A binary `data_source` is decoded once, where its row is read, for the built-in rules as
for a reward function: a parquet column of binary `openai/gsm8k` is scored by the GSM8K rule,
by train's loader and by `mfsdp config check`.

Was: it was decoded for `reward.path` alone; without it the row was refused "no built-in
reward for data_source b'openai/gsm8k' (built in: openai/gsm8k, ...)", naming a source in
its own list."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from cli.config_check import check_config
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import load_rl_prompts
from trainer.rewards.dispatch import GSM8K_SOURCES
from trainer.tiny import build_tokenizer


def test_a_binary_built_in_source_is_scored_by_its_rule(tmp_path: Path):
    sources = sorted(GSM8K_SOURCES)
    path = tmp_path / "rl.parquet"
    pq.write_table(
        pa.table(
            {
                "prompt": [[{"role": "user", "content": "What is 2 + 3?"}]] * len(sources),
                "data_source": pa.array([s.encode() for s in sources], pa.binary()),
                "reward_model": [{"ground_truth": "5"}] * len(sources),
            }
        ),
        path,
    )
    prompts, _ = load_rl_prompts([str(path)], RLDataConfig(), build_tokenizer())
    assert [prompt.data_source for prompt in prompts] == sources
    lengths = ["data.max_prompt_length=256", "rollout.max_response_length=256"]
    check_config("grpo", None, [f"data.train_files={path}", "trainer.device=cpu", *lengths])
