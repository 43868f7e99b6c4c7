"""verl-format RL rows -> tokenized prompts with what the reward needs.

Rows keep verl's columns unchanged: `prompt` (chat turns, or plain text), `data_source`,
`reward_model.ground_truth`, `extra_info`. Prompts are rendered with the tokenizer's chat
template and the generation prompt, once, before training starts, so a bad row fails early.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tqdm import tqdm

from mfsdp_ckpt.errors import MfsdpUsageError
from trainer.data.chat import ChatFormatError, chat_ids, checked_turns
from trainer.data.files import read_rows_with_origins
from trainer.grpo.config import RLDataConfig


class RLDataError(MfsdpUsageError, ValueError):
    """A row cannot become a prompt; the message names the file, row and reason."""


@dataclass
class RLPrompt:
    prompt_ids: list[int]
    data_source: str
    ground_truth: Any
    extra_info: Any


def chat_turns(prompt: Any) -> list[dict]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    try:
        turns = checked_turns(prompt)
    except ChatFormatError as err:
        raise RLDataError(
            f"prompt must be text or a list of {{role, content}} turns: {err}"
        ) from None
    if not turns:
        raise RLDataError("prompt must be text or a list of {role, content} turns, found []")
    return turns


def load_rl_prompts(
    files: list[str],
    cfg: RLDataConfig,
    tokenizer: Any,
    progress: bool = False,
    limit: int | None = None,
) -> tuple[list[RLPrompt], int]:
    """(prompts, number of rows dropped for being longer than data.max_prompt_length)."""
    rows, origins = read_rows_with_origins(files)
    rows = rows[:limit]
    prompts, dropped = [], 0
    label = ",".join(files)
    for index, row in enumerate(
        tqdm(rows, desc=f"tokenize {label}", disable=not progress, leave=False)
    ):
        where = origins(index)
        if cfg.prompt_key not in row:
            raise RLDataError(f"{where}: no '{cfg.prompt_key}' column (found {sorted(row)})")
        reward_model = row.get("reward_model") or {}
        if not isinstance(reward_model, dict) or "ground_truth" not in reward_model:
            raise RLDataError(f"{where}: no reward_model.ground_truth")
        try:
            turns = chat_turns(row[cfg.prompt_key])
        except RLDataError as err:
            raise RLDataError(f"{where}: {err}") from None
        try:
            ids = list(chat_ids(tokenizer, turns, add_generation_prompt=True)["input_ids"])
        except ChatFormatError as err:
            raise RLDataError(f"{where}: {err}") from None
        if len(ids) > cfg.max_prompt_length:
            if not cfg.filter_overlong_prompts:
                raise RLDataError(
                    f"{where}: prompt has {len(ids)} tokens > "
                    f"data.max_prompt_length={cfg.max_prompt_length} "
                    "(raise it or set data.filter_overlong_prompts=true)"
                )
            dropped += 1
            continue
        prompts.append(
            RLPrompt(
                ids,
                str(row.get("data_source", "")),
                reward_model["ground_truth"],
                row.get("extra_info"),
            )
        )
    return prompts, dropped
