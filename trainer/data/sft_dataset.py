"""Load SFT rows from files and tokenize them all up front, so a bad row fails before training."""

from __future__ import annotations

import random
from typing import Any

from tqdm import tqdm

from trainer.config import ConfigError, DataConfig
from trainer.data.chat import (
    ChatColumns,
    ChatFormatError,
    Example,
    messages_of,
    tokenize_chat,
    truncate,
)
from trainer.data.files import read_rows


def tokenize_rows(
    rows: list[dict[str, Any]], cfg: DataConfig, tokenizer: Any, label: str, progress: bool
) -> list[Example]:
    columns = ChatColumns(
        cfg.messages_key,
        cfg.prompt_key,
        cfg.response_key,
        tuple(cfg.prompt_dict_keys),
        tuple(cfg.response_dict_keys),
    )
    examples = []
    for index, row in enumerate(
        tqdm(rows, desc=f"tokenize {label}", disable=not progress, leave=False)
    ):
        where = f"{label} row {index}"
        try:
            messages = messages_of(row, columns)
            example = tokenize_chat(tokenizer, messages)
        except ChatFormatError as err:
            raise ChatFormatError(f"{where}: {err}") from None
        examples.append(truncate(example, cfg.max_length, cfg.truncation, where))
    return examples


def load_sft_splits(
    cfg: DataConfig, tokenizer: Any, seed: int, progress: bool
) -> tuple[list[Example], list[Example]]:
    """(train, validation) examples; validation from `val_files`, else a seeded `val_ratio`
    hold-out."""
    if not cfg.train_files:
        raise ConfigError("data.train_files: no training files given")
    rows = read_rows(cfg.train_files)
    if cfg.val_files:
        val_rows = read_rows(cfg.val_files)
    elif cfg.val_ratio > 0:
        order = list(range(len(rows)))
        random.Random(seed).shuffle(order)
        held = set(order[: max(1, round(cfg.val_ratio * len(rows)))])
        val_rows = [rows[i] for i in sorted(held)]
        rows = [row for i, row in enumerate(rows) if i not in held]
    else:
        val_rows = []
    train = tokenize_rows(rows, cfg, tokenizer, ",".join(cfg.train_files), progress)
    val = tokenize_rows(
        val_rows, cfg, tokenizer, ",".join(cfg.val_files) or "validation split", progress
    )
    return train, val
