"""A chat that calls a tool, and the loaders that train it as an SFT row or read it as a
GRPO prompt, for the tests of how chat templates render calling turns: each of those tests
asks what one chat becomes through the commands' own loaders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainer.config import DataConfig
from trainer.data.chat import Example
from trainer.data.row_table import RowTable
from trainer.data.sft_dataset import load_sft_splits
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import load_rl_prompts

CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
USER = {"role": "user", "content": "Weather in Oslo?"}
RESULT = {"role": "tool", "name": "get_weather", "content": "20"}
ANSWER = {"role": "assistant", "content": "It is 20 degrees."}


def calling(content: Any, calls: Any = (CALL,)) -> dict[str, Any]:
    """An assistant turn with `content` that makes `calls`."""
    return {"role": "assistant", "content": content, "tool_calls": list(calls)}


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> str:
    """`rows` written to `path` as JSON lines; the path as text, as configs give it."""
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def sft_rows(tokenizer: Any, path: Path, chats: list[list[dict[str, Any]]]) -> RowTable[Example]:
    """The training examples of `chats`, each a `messages` row of a file at `path`, as
    `mfsdp sft` loads them."""
    files = [write_jsonl(path, [{"messages": chat} for chat in chats])]
    train, _ = load_sft_splits(DataConfig(train_files=files, max_length=1024), tokenizer, 0, False)
    return train


def grpo_prompt_ids(tokenizer: Any, path: Path, prompt: list[dict[str, Any]]) -> list[int]:
    """The token ids of `prompt`, the one row of a verl RL file at `path`, as `mfsdp grpo`
    loads it."""
    row = {"prompt": prompt, "reward_model": {"ground_truth": "7"}}
    files = [write_jsonl(path, [row])]
    table, _ = load_rl_prompts(
        files, RLDataConfig(max_prompt_length=1024), tokenizer, custom_reward=True
    )
    return list(table[0].prompt_ids)


def trained_text(tokenizer: Any, example: Example) -> str:
    """The text of `example`'s trained tokens (those its loss mask keeps)."""
    return tokenizer.decode([t for t, m in zip(example.input_ids, example.loss_mask) if m])
