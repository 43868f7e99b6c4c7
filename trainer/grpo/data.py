"""verl-format RL rows -> tokenized prompts with what the reward needs.

Rows keep verl's columns unchanged: `prompt` (chat turns, or plain text), `data_source`,
`reward_model.ground_truth`, `extra_info`. Prompts are rendered with the tokenizer's chat
template and the generation prompt, once, before training starts, so a bad row fails early.

A row is refused, naming its file and row, when its prompt is empty (it trains on nothing)
or it has no `reward_model.ground_truth`. With the built-in rewards (no `reward.path`), which
compare the answer as text, a null, NaN or empty ground truth is refused too (it scores 0
whatever the response), and the ground truth must be text, or a whole number (compared as its
decimal text: `72` and `72.0` as "72"; a fraction such as a float32 0.1 is refused, its text a
guess), and the row's `data_source` one with a built-in rule: a source with none failed the
run at its first reward, after steps were saved, naming no file. A custom reward function may
take any other value (a list, a dict, null or empty: a judge's or a test runner's reward needs
none, and verl gives it as it is) and any data_source text (a missing or null one is given
as "", a binary one decoded as UTF-8; another value is refused, its text a guess): the
ground truth is given to it unchanged.
A row's `extra_info` must be a dict, or missing or null (given as `{}`), whatever the reward,
as verl reads it before training (`checked_extra_info`); a custom function is given it as
verl's reward manager gives it (`reward_extra_info`).
A row of verl's tool or interaction tables or naming an agent loop (`agent_name`), or whose
prompt holds a multimodal placeholder with no media column (unless
`data.placeholders_as_text`), is refused (`unsupported_row`): it trained as another task.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.errors import MfsdpUsageError
from trainer.data.chat import (
    ChatFormatError,
    ChatTooLong,
    chat_ids,
    checked_turns,
    refuse_unrendered_tool_calls,
    refuse_unrendered_turns,
    row_limit,
    turn_keys_texts,
    turn_texts,
)
from trainer.data.chat_as_text import chat_written_as_text
from trainer.data.media_columns import read_rows_refusing_media, refuse_media_columns
from trainer.data.row_table import IntLists, Pickled, RowTable, Shared, TextTuples
from trainer.grpo.config import RLDataConfig
from trainer.grpo.prompt_row import checked_prompt_row
from trainer.grpo.unsupported_rows import TASK_COLUMNS, unsupported_row
from trainer.progress import item_bar
from trainer.rewards.dispatch import (
    ground_truth_text,
    no_text_to_compare,
)

# what a row gives besides its prompt (`data.prompt_key`): the reward's inputs, and the
# columns telling a row of another rollout (`TASK_COLUMNS`: extra_info and agent_name)
RL_COLUMNS = ("reward_model", "data_source", *TASK_COLUMNS)


class RLDataError(MfsdpUsageError, ValueError):
    """A row cannot become a prompt; the message names the file, row and reason."""


@dataclass
class RLPrompt:
    prompt_ids: list[int]
    data_source: str
    ground_truth: Any
    extra_info: Any
    # the prompt's turns as the data file holds them (`turn_texts`), before the chat
    # template: what a resume compares to tell an edited prompt (trainer/resume.py)
    prompt: tuple[str, ...] = ()
    # those turns' other keys with a value (`turn_keys_texts`), digested apart from `prompt`
    prompt_keys: tuple[str, ...] = ()


def prompt_table() -> RowTable[RLPrompt]:
    """Prompts held as flat arrays (`row_table`): a list of them held each token id as a
    Python int and each row's extra_info as a dict, on every rank, for the whole run."""
    return RowTable(
        RLPrompt,
        {
            "prompt_ids": IntLists("i"),
            "data_source": Shared(),
            "ground_truth": Pickled(),
            "extra_info": Pickled(),
            "prompt": TextTuples(),
            "prompt_keys": TextTuples(),
        },
    )


def chat_turns(prompt: Any, column: str = "prompt") -> list[dict]:
    """A row's prompt (its `column`) as chat turns: verl's data files hold either a list of
    {role, content} turns or bare text, which is taken as one user turn (not iterated as
    turns, one per character). A prompt that is empty or all blank text is refused
    (`RLDataError`, to which the caller adds the row's name): it asks the policy nothing;
    so is text holding chat turns written out (`chat_written_as_text`)."""
    if isinstance(prompt, str):
        if not prompt.strip():
            raise RLDataError(f"prompt is empty text ({cut_to(repr(prompt), 20)})")
        if why := chat_written_as_text(prompt, column):
            raise RLDataError(why)
        return [{"role": "user", "content": prompt}]
    try:
        turns = checked_turns(prompt)
    except ChatFormatError as err:
        raise RLDataError(
            f"prompt must be text or a list of {{role, content}} turns: {err}"
        ) from None
    if not turns:
        raise RLDataError("prompt must be text or a list of {role, content} turns, found []")
    if not any((turn["content"] or "").strip() for turn in turns):  # null: calls tools
        raise RLDataError("prompt's turns are all empty text")
    return turns


def checked_ground_truth(value: Any, custom_reward: bool) -> str | None:
    """Why `value` cannot be a row's ground truth, or None when it can. A custom reward
    function (`custom_reward`) takes any value, as verl gives it (null too: a judge needs
    none). The built-in rules compare text, as verl's do: null and empty text score 0
    whatever the response, and a value with no text to compare (`ground_truth_text`: text,
    or a whole number as its decimal text) is refused: a list, dict or bool could never
    match, and a fraction only by the chance of how it was written (a float32 `0.1` reads
    0.10000000149011612)."""
    if custom_reward:
        return None
    if value is None:
        return "reward_model.ground_truth is null"
    if isinstance(value, float) and math.isnan(value):  # a missing value, as pandas writes it
        return "reward_model.ground_truth is NaN"
    if isinstance(value, str):
        return (
            None
            if value.strip()
            else f"reward_model.ground_truth is empty text ({cut_to(repr(value), 20)})"
        )
    if ground_truth_text(value) is not None:
        return None
    return f"reward_model.ground_truth is {no_text_to_compare(value)}"


def checked_extra_info(value: Any) -> str | None:
    """Why `value` cannot be a row's `extra_info`, or None when it can: verl's RLHFDataset
    reads every row's extra_info as a dict (a missing or null one as `{}`), whatever the
    reward, and stops on anything else before training (JSON text or a parquet map too), so
    a verl reward file may call `extra_info.get(...)`. Refused whatever the reward: with a
    built-in one such a table trained here, where verl stops (a tool row written so is
    refused for its tools first: `unsupported_rows` reads the dict it holds)."""
    if value is None or isinstance(value, dict):
        return None
    return (
        f"extra_info is {type(value).__name__} {cut_to(repr(value), 60)}: verl reads every"
        " row's extra_info as a dict and stops on anything else, and a reward function is"
        " given it as one; write it as a struct (a JSON object), or leave it out or null"
        " for {}"
    )


def data_source_text(value: Any) -> str:
    """A row's `data_source` as the text the reward is given: a missing or null one as "",
    as the docs say (`str()` of it gave a reward 'None', which routed the row elsewhere or
    raised in verl's default_compute_score), and a binary column's value decoded as UTF-8
    (`str()` gave its repr, "b'openai/gsm8k'"). Any other value, or bytes that are no UTF-8,
    is refused (`RLDataError`, to which the caller adds the row's name): its text would be a
    guess."""
    if value is None or isinstance(value, str):
        return value or ""
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise RLDataError(
                f"data_source is binary data that is not UTF-8 text ({cut_to(repr(value), 60)})"
            ) from None
    raise RLDataError(
        f"data_source is {type(value).__name__} {cut_to(repr(value), 60)}, not text"
        " (a reward function is given it as text)"
    )


def row_data_source(row: dict[str, Any], where: str) -> str:
    """The `data_source` of `row`, named `where` in its refusal, as the reward is given it
    (`data_source_text`)."""
    try:
        return data_source_text(row.get("data_source"))
    except RLDataError as err:
        raise RLDataError(f"{where}: {err}") from None


def load_rl_prompts(
    files: list[str],
    cfg: RLDataConfig,
    tokenizer: Any,
    progress: bool = False,
    limit: int | None = None,
    custom_reward: bool = False,
) -> tuple[RowTable[RLPrompt], int]:
    """(prompts, number of rows dropped for being longer than data.max_prompt_length).
    `custom_reward`: a `reward.path` function scores the rows, which may take a ground truth
    the built-in rules cannot (a list, a dict)."""
    # the columns a row is read through, those verl's RLHFDataset, agent loop and reward
    # manager read: no other is decoded (files.py)
    read = (cfg.prompt_key, *RL_COLUMNS)
    for path in files:  # from its footer or first row: a media column is not decoded
        refuse_media_columns(path)
    rows, origins = read_rows_refusing_media(files, read)  # and a later row's
    rows = rows[:limit]
    prompts, dropped, shortest = prompt_table(), 0, math.inf
    # a prompt over the limit is dropped with the filter on, refused with it off
    remedy = None if cfg.filter_overlong_prompts else "data.filter_overlong_prompts=true"
    bound = row_limit(tokenizer, "data.max_prompt_length", cfg.max_prompt_length, remedy=remedy)
    too_long: str | None = None  # the first prompt whose text is more than the limit holds
    label = ",".join(files)
    for index, row in enumerate(item_bar(rows, f"tokenize {label}", progress)):
        where = origins(index)
        whole_row = functools.partial(origins.whole_row, index, row)
        turns, source = checked_prompt_row(row, where, whole_row, cfg.prompt_key, custom_reward)
        # tools, a media placeholder (as text where the table means it so)
        if why := unsupported_row(
            row, cfg.prompt_key, placeholders_as_text=cfg.placeholders_as_text
        ):
            raise RLDataError(f"{where}: {why}")
        try:
            rendered = chat_ids(tokenizer, turns, bound, add_generation_prompt=True)
            refuse_unrendered_tool_calls(
                tokenizer, turns, bound, rendered["text"], add_generation_prompt=True
            )
            refuse_unrendered_turns(
                tokenizer, turns, bound, rendered["text"], add_generation_prompt=True
            )
            ids = rendered["input_ids"]
        except ChatTooLong as err:  # over-long before it is tokenized: the same policy
            if not cfg.filter_overlong_prompts:
                raise RLDataError(f"{where}: {err}") from None
            dropped, too_long = dropped + 1, too_long or f"{where}: {err}"
            continue
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
            shortest = min(shortest, len(ids))
            continue
        prompts.append(
            RLPrompt(
                ids,
                source,
                row["reward_model"]["ground_truth"],
                row.get("extra_info"),
                turn_texts(turns),
                turn_keys_texts(turns),
            )
        )
    if rows and not prompts:  # else the run's first error blamed the batch size
        # a prompt found before it was tokenized: its own line says what to do
        counted = shortest < math.inf
        has = shortest if counted else f"more than that: {too_long}"
        advice = "; raise it" if counted else ""
        raise RLDataError(
            f"{label}: all {len(rows)} prompts are longer than data.max_prompt_length="
            f"{cfg.max_prompt_length} tokens (the shortest has {has}){advice}"
        )
    return prompts, dropped
