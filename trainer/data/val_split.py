"""The SFT validation split `data.val_ratio` holds out of the training rows, refused where it
leaves none to train on.

A `data.val_ratio` that rounds to every row (0.9 of 3 rows: `round(2.7)` is 3) held them all
out, and the run failed on "data.global_batch_size=1 exceeds the 0 training rows", a line
that blamed the batch size of a file that has rows, while `mfsdp config check` said ok. verl's
SFT trainer has no such setting (it validates on `data.val_files` alone), so nothing is
trimmed to leave a row behind: the split is refused, naming the setting and the row counts,
by train and, before torch loads, by the config check (`check_val_split`).
"""

from __future__ import annotations

import itertools
from typing import Any

from trainer.config_base import ConfigError
from trainer.data.files import iter_file_rows


def held_out_count(val_ratio: float, rows: int, files: list[str]) -> int:
    """How many of the `rows` training rows of `files` `val_ratio` holds out: its share,
    rounded, and at least one; ConfigError where that leaves none to train on."""
    held = max(1, round(val_ratio * rows))
    if held >= rows:
        raise ConfigError(
            f"data.val_ratio={val_ratio:g} holds out {held} of the {rows} rows of"
            f" data.train_files ({','.join(files)}), leaving none to train on: lower it or"
            " give data.val_files"
        )
    return held


def check_val_split(data: Any) -> None:
    """Refuse (`held_out_count`) a `data.val_ratio` split of config `data` that leaves no
    training row, counting only the rows that can: from `bound` rows on, the share held out
    rounds to fewer than all of them, so no file is read further."""
    if data.val_files or not data.val_ratio:
        return
    bound = int(0.5 / (1 - data.val_ratio)) + 2  # n * (1 - ratio) > 0.5: a row is left
    rows = 0
    for path in data.train_files:
        rows += sum(1 for _ in itertools.islice(iter_file_rows(path, ()), bound - rows))
        if rows >= bound:
            return
    held_out_count(data.val_ratio, rows, list(data.train_files))
