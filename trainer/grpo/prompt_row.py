"""A GRPO data row checked as `load_rl_prompts` checks it (calling this) before it renders
the prompt: its prompt column, whether it asks for tools or an agent loop
(`unsupported_task`, first: no remedy the later refusals offer trains such a row), ground
truth, data_source, extra_info (a dict or null, whatever the reward, as verl reads it), and
prompt turns.
None of this needs a tokenizer, so `mfsdp config check` and the launcher run it on a file's
first row before torch loads (`cli/first_rows.py`): a file of other columns was refused only
by train, after the model had loaded."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from trainer.data.table_kinds import table_kind_hint
from trainer.grpo.unsupported_rows import unsupported_task
from trainer.rewards.dispatch import built_in_rule, no_built_in_reward


class PromptRow(NamedTuple):
    """A GRPO row as it trains: its prompt turns and its `data_source` as text."""

    turns: list[dict]
    data_source: str


def checked_prompt_row(
    row: dict[str, Any],
    where: str,
    whole_row: Callable[[], dict[str, Any]],
    prompt_key: str,
    custom_reward: bool,
) -> PromptRow:
    """The prompt turns and data_source of `row` (named `where`; `whole_row` gives every
    column of its file, for a row without the prompt column), or RLDataError with train's
    line. Its data_source is made text here, once, for the built-in rules and a custom
    function alike (`data_source_text`: a binary column's value decoded): a binary
    `openai/gsm8k` was refused as no built-in reward for "b'openai/gsm8k'".
    `load_rl_prompts` calls this for each row, so its module is imported here, not above."""
    from trainer.grpo.data import (
        RLDataError,
        chat_turns,
        checked_extra_info,
        checked_ground_truth,
        row_data_source,
    )

    if prompt_key not in row:  # named with the columns it has, not those read
        whole = whole_row()
        raise RLDataError(
            f"{where}: no '{prompt_key}' column (found {sorted(whole)})"
            f"{table_kind_hint(whole, 'grpo')}"
        )
    if why := unsupported_task(row):  # before a refusal whose remedy would not train it
        raise RLDataError(f"{where}: {why}")
    reward_model = row.get("reward_model") or {}
    if not isinstance(reward_model, dict) or "ground_truth" not in reward_model:
        raise RLDataError(f"{where}: no reward_model.ground_truth")
    bad_truth = checked_ground_truth(reward_model["ground_truth"], custom_reward)
    if bad_truth:
        raise RLDataError(f"{where}: {bad_truth}")
    if not custom_reward and "data_source" not in row:
        raise RLDataError(
            f"{where}: no 'data_source' column (it picks the built-in reward; set reward.path "
            "and reward.name to score rows without one)"
        )
    source = row_data_source(row, where)
    if not custom_reward and built_in_rule(source) is None:
        raise RLDataError(f"{where}: {no_built_in_reward(source)}")
    if bad_extra := checked_extra_info(row.get("extra_info")):
        raise RLDataError(f"{where}: {bad_extra}")
    try:
        return PromptRow(chat_turns(row[prompt_key], prompt_key), source)
    except RLDataError as err:
        raise RLDataError(f"{where}: {err}") from None
