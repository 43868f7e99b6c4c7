"""Which columns a row's chat is read from: its messages column (`data.messages_key`), or
its prompt and response columns (`data.prompt_key`, `data.response_key`).

A table may hold both: a `messages` column kept beside `extra_info`, UltraChat's `prompt`
beside its `messages`. verl trains what its config picks (`data.multiturn.enable`, false by
default: SFTDataset reads the prompt and response), and here a row's messages won over the
prompt and response keys a config named, silently. `data.chat_columns` picks (verl's key
sets it). Left out of a config that gives `data.prompt_key` or `response_key` (at any
value, the default's too), the loader makes it `prompt_response` (trainer/config.py's
`_named_chat_columns`: only it sees which keys were given). Otherwise `auto`: prompt or
response keys other than the default, or their dict keys, pick them, and otherwise a row's
messages train where it has them, a note saying so when rows hold both.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from trainer.config import DataConfig
from trainer.data.chat_columns import AUTO, MESSAGES, PROMPT_RESPONSE, ChatColumns, holds
from trainer.env_ints import process_rank

log = logging.getLogger("mfsdp.data")


def chat_source(cfg: DataConfig) -> str:
    """`data.chat_columns`; auto (given so, or left out of a config naming no prompt or
    response key), `prompt_response` where the config's values name the prompt or response
    (a `data.prompt_key` / `response_key` other than the default, or their dict keys), as
    verl's SFTDataset reads them, else auto: a row's messages where it has them."""
    if cfg.chat_columns != AUTO:
        return cfg.chat_columns
    default = DataConfig()
    named = (cfg.prompt_key, cfg.response_key) != (default.prompt_key, default.response_key)
    return PROMPT_RESPONSE if named or cfg.prompt_dict_keys or cfg.response_dict_keys else AUTO


def chat_columns(cfg: DataConfig) -> ChatColumns:
    """The columns `cfg` reads a row's chat from, with, where it reads one kind only, the
    setting that picked it and the one that trains a row holding the other kind."""
    source = chat_source(cfg)
    columns = ChatColumns(
        cfg.messages_key,
        cfg.prompt_key,
        cfg.response_key,
        tuple(cfg.prompt_dict_keys),
        tuple(cfg.response_dict_keys),
        source,
    )
    if source == AUTO:
        return columns
    if cfg.chat_columns != AUTO:
        picked_by = f"data.chat_columns={cfg.chat_columns}"
    else:
        picked_by = ", ".join(_named_prompt_response(cfg))
    if chat_source(replace(cfg, chat_columns="auto")) == AUTO:
        remedy = "data.chat_columns=auto trains each row from what it has"
    else:  # named prompt/response keys pick them whatever the row holds
        other = PROMPT_RESPONSE if source == MESSAGES else MESSAGES
        remedy = (
            f"data.chat_columns={other} reads those in every row (each row is read from"
            " what it has only with the default prompt/response keys)"
        )
    return replace(columns, picked_by=picked_by, remedy=remedy)


def _named_prompt_response(cfg: DataConfig) -> list[str]:
    """The prompt/response settings `cfg` gives other than the default, as `key=value`."""
    default = DataConfig()
    named = [
        f"data.{key}={getattr(cfg, key)}"
        for key in ("prompt_key", "response_key")
        if getattr(cfg, key) != getattr(default, key)
    ]
    fields = [
        f"data.{key}=[{','.join(getattr(cfg, key))}]"
        for key in ("prompt_dict_keys", "response_dict_keys")
        if getattr(cfg, key)
    ]
    return named + fields


def chat_keys(cfg: DataConfig) -> tuple[str, ...]:
    """The columns a row's chat may be read from: those of `chat_source` only."""
    source = chat_source(cfg)
    if source == MESSAGES:
        return (cfg.messages_key,)
    if source == PROMPT_RESPONSE:
        return (cfg.prompt_key, cfg.response_key)
    return (cfg.messages_key, cfg.prompt_key, cfg.response_key)


def say_which_trains(
    cfg: DataConfig, tables: Sequence[tuple[Sequence[dict[str, Any]], Callable[[int], str]]]
) -> None:
    """One note, on the main rank, where rows of `tables` (rows, and what names row i) hold
    both a messages cell and prompt and response cells while nothing picks one: which
    trains, how many rows, the first named, and the key that picks the other. A null cell
    holds nothing: a parquet file gives every row every column, and rows of one kind were
    counted as holding both, the first named one that the other setting then refused."""
    if chat_source(cfg) != AUTO or process_rank() != 0:
        return
    keys = (cfg.prompt_key, cfg.response_key)
    both = [
        where(index)
        for rows, where in tables
        for index, row in enumerate(rows)
        if holds(row, (cfg.messages_key, *keys))
    ]
    if both:
        more = f" (and {len(both) - 1} more rows)" if len(both) > 1 else ""
        log.warning(
            "note: %s%s: both a '%s' column and '%s'/'%s' columns; '%s' trains"
            " (data.chat_columns=prompt_response, verl's data.multiturn.enable=false, trains"
            " '%s'/'%s')",
            both[0],
            more,
            cfg.messages_key,
            *keys,
            cfg.messages_key,
            *keys,
        )
