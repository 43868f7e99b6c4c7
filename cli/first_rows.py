"""The first row of each data file checked as train checks its rows before it tokenizes them,
before torch loads: `mfsdp config check` said ok to a file of other columns (a ShareGPT
`conversation`, `from`/`value` turns, messages written as a string) that `mfsdp train`
refused at its first row after loading the model. Only the first row of each file is read
(a .jsonl's first line, a parquet's first row group through the columns read, where that
group is one batch of train's reader: a larger one is left to train, which decodes it whole
to measure it); every other row is train's to check, and so is the first row of a file train
may not read (a GRPO val file past the first, where `data.val_max_samples` keeps the first N
rows). Every file's columns, train's and val's, are checked from its footer (or first row)
for verl's image and video columns (`refuse_media_columns`), as train checks each file it
opens before it reads a row: that is cheap whatever its rows hold, and a later val file with
`images` was said ok here, then refused by train after loading the model. So is the first
row of every GRPO file train reads for verl's tool and interaction rows and media
placeholders (`unsupported_row`) and a non-dict `extra_info` (`checked_extra_info`),
whatever its row groups (three columns, within train's decoding budget); a val file past
the first under `data.val_max_samples` is not, as train may not read it (refusing it
refused a config train runs). An SFT `data.val_ratio` is checked for a hold-out of every
training row (`check_val_split`, which counts no more rows than that takes)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any


def check_first_rows(cfg: Any, kind: str) -> None:
    """Refuse, with train's line, a data file of `cfg` (`kind`: sft or rl) whose first row
    train refuses before it tokenizes it; the files were checked to exist and be readable
    tables (`check_data_files`). The train files are checked before the val files, each
    file's columns before any file's rows, as train opens them, so the line is the one
    train prints first."""
    from trainer.data.media_columns import refuse_media_columns

    val_files = list(cfg.data.val_files)
    read_val = val_files
    if kind == "rl" and cfg.data.val_max_samples is not None:
        read_val = val_files[:1]  # the first N rows may all come from it
    for opened, read in ((cfg.data.train_files, cfg.data.train_files), (val_files, read_val)):
        for path in opened:  # each one train opens, from its footer or first row
            refuse_media_columns(path)
        for path in read:
            if kind == "rl":
                _check_rl_first_row(cfg, path)
            elif _first_row_is_cheap(path):
                from trainer.data.sft_dataset import check_row_chat, columns_read

                check_row_chat(cfg.data, *_first_row(path, columns_read(cfg.data)))
    if kind == "sft":  # a hold-out of every row, which train refuses once it has read them
        from trainer.data.val_split import check_val_split

        check_val_split(cfg.data)


def _check_rl_first_row(cfg: Any, path: str) -> None:
    """Refuse a GRPO file's first row as train's loader does: its prompt where that row is
    cheap to read (`_first_row_is_cheap`), then whether it is a tool or interaction row or
    holds a media placeholder with no media column (`unsupported_row`), and its extra_info
    (`checked_extra_info`), which are checked whatever the file's row groups: it reads
    three columns, within train's decoding budget, and verl's tables hold such rows
    throughout, so the first row tells."""
    from trainer.grpo.data import RL_COLUMNS, RLDataError, checked_extra_info
    from trainer.grpo.prompt_row import checked_prompt_row
    from trainer.grpo.unsupported_rows import TASK_COLUMNS, unsupported_row, unsupported_task

    if _first_row_is_cheap(path):
        row, where, whole_row = _first_row(path, (cfg.data.prompt_key, *RL_COLUMNS))
        custom_reward = bool(cfg.reward.path)
        checked_prompt_row(row, where, whole_row, cfg.data.prompt_key, custom_reward)
    else:  # the row's extra_info, read, is refused as train's checked_prompt_row does
        row, where, _ = _first_row(path, (cfg.data.prompt_key, *TASK_COLUMNS))
        if why := unsupported_task(row) or checked_extra_info(row.get("extra_info")):
            raise RLDataError(f"{where}: {why}")
    as_text = cfg.data.placeholders_as_text
    if why := unsupported_row(row, cfg.data.prompt_key, placeholders_as_text=as_text):
        raise RLDataError(f"{where}: {why}")


def _first_row_is_cheap(path: str) -> bool:
    """Whether train's reader gives `path`'s first row without decoding more than one batch:
    any file but a parquet whose first row group holds more rows than a batch."""
    from trainer.data.files import parquet_first_group_is_one_batch

    return not path.lower().endswith(".parquet") or parquet_first_group_is_one_batch(path)


def _first_row(
    path: str, read: Collection[str]
) -> tuple[dict[str, Any], str, Callable[[], dict[str, Any]]]:
    """The first row of `path` through the columns `read`, how train names it, and what
    gives it with every column of its file (for a row lacking those train reads)."""
    from trainer.data.files import RowOrigins, iter_file_rows

    row, line = next(iter_file_rows(path, read))  # dropped, the generator closes the file
    origins = RowOrigins((path,), (0,), (None if line is None else (line,),))
    return row, origins(0), lambda: origins.whole_row(0, row)
