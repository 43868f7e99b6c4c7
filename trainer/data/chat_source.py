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
from typing import Any

from trainer.config import DataConfig
from trainer.env_ints import process_rank

log = logging.getLogger("mfsdp.data")

AUTO, MESSAGES, PROMPT_RESPONSE = "auto", "messages", "prompt_response"


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
    both a messages cell and prompt and response columns while nothing picks one: which
    trains, how many rows, the first named, and the key that picks the other."""
    if chat_source(cfg) != AUTO or process_rank() != 0:
        return
    keys = (cfg.prompt_key, cfg.response_key)
    both = [
        where(index)
        for rows, where in tables
        for index, row in enumerate(rows)
        if row.get(cfg.messages_key) is not None and all(key in row for key in keys)
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
