"""Load SFT rows from files and tokenize them all up front, so a bad row fails before training."""

from __future__ import annotations

import functools
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from trainer.config import ConfigError, DataConfig
from trainer.data.chat import (
    TEMPLATE_COLUMNS,
    TRUNCATION_REMEDY,
    ChatFormatError,
    Example,
    NoChatColumns,
    messages_of,
    row_limit,
    tokenize_sft_row,
    truncate,
    turn_keys_texts,
    turn_texts,
)
from trainer.data.chat_columns import ChatColumns, no_chat_columns, other_kind
from trainer.data.chat_source import chat_columns, chat_keys, say_which_trains
from trainer.data.files import RowOrigins
from trainer.data.media_columns import read_rows_refusing_media, refuse_media_columns
from trainer.data.row_table import IntLists, RowTable, Shared, TextTuples
from trainer.data.val_split import held_out_count
from trainer.data.verl_turns import MASKED, UNTRAINED
from trainer.env_ints import process_rank
from trainer.progress import item_bar

log = logging.getLogger("mfsdp.data")


def example_table() -> RowTable[Example]:
    """Examples held as flat arrays (`row_table`): a list of them took about 2.6 KB a row
    of Python objects on every rank, ten times the chat rows they came from."""
    return RowTable(
        Example,
        {
            "input_ids": IntLists("i"),
            "loss_mask": IntLists("b"),
            "prompt": TextTuples(),
            "prompt_keys": TextTuples(),
            "unlike_verl": Shared(),
        },
    )


def tokenize_rows(
    rows: list[dict[str, Any]],
    cfg: DataConfig,
    tokenizer: Any,
    where: Callable[[int], str],
    progress: bool,
    desc: str = "tokenize",
    whole_row: Callable[[int], dict[str, Any]] | None = None,
) -> RowTable[Example]:
    """Each row as a training example, held as flat arrays (`example_table`); `where(i)`
    names row i in errors (its file and row), `whole_row(i)` gives it with every column of
    its file, for the error of a row with no chat columns (`NoChatColumns`), when `rows` hold
    only the columns read."""
    columns = chat_columns(cfg)
    examples = example_table()
    untrained: list[tuple[str, bool]] = []
    unlike_verl: list[tuple[str, str]] = []
    limit = row_limit(
        tokenizer,
        "data.max_length",
        cfg.max_length,
        truncated=cfg.truncation != "error",
        remedy=TRUNCATION_REMEDY,
    )
    for index, row in enumerate(item_bar(rows, desc, progress)):
        try:
            messages, example = tokenize_sft_row(tokenizer, row, columns, limit)
        except ChatFormatError as err:
            whole = None if whole_row is None else functools.partial(whole_row, index)
            raise row_error(err, columns, where(index), whole) from None
        kept = truncate(example, cfg.max_length, cfg.truncation, where(index))
        if kept.num_targets == 0:
            untrained.append((where(index), kept is not example))
        if kept.unlike_verl:
            unlike_verl.append((where(index), kept.unlike_verl))
        prompt = [turn for turn in messages if turn["role"] != "assistant"]
        examples.append(
            replace(kept, prompt=turn_texts(prompt), prompt_keys=turn_keys_texts(prompt))
        )
    _say_untrained(untrained, len(examples), cfg)
    _say_unlike_verl(unlike_verl, len(examples))
    return examples


def row_error(
    err: ChatFormatError,
    columns: ChatColumns,
    where: str,
    whole_row: Callable[[], dict[str, Any]] | None,
) -> ChatFormatError:
    """`err`, raised by a row, as train says it: named by `where`; a row with no chat columns
    (`NoChatColumns`) said again of its whole row (`whole_row`: every column of its file),
    and a null cell of the kind read with the other kind the row may hold."""
    if isinstance(err, NoChatColumns):
        said = str(err) if whole_row is None else no_chat_columns(whole_row(), columns)
        return ChatFormatError(f"{where}: {said}")
    other = "" if whole_row is None else other_kind(whole_row(), columns)
    return ChatFormatError(f"{where}: {err}{other}")


def columns_read(cfg: DataConfig) -> tuple[str, ...]:
    """The columns a row is read through: no other is decoded (files.py)."""
    return (*chat_keys(cfg), *TEMPLATE_COLUMNS)


def check_row_chat(
    cfg: DataConfig, row: dict[str, Any], where: str, whole_row: Callable[[], dict[str, Any]]
) -> None:
    """Refuse, with train's line (`row_error`), a row whose chat train refuses before it
    tokenizes it (`messages_of`: other columns, turns without role and content, messages
    written as a string); needs no tokenizer, so it runs before torch loads."""
    columns = chat_columns(cfg)
    try:
        messages_of(row, columns)
    except ChatFormatError as err:
        raise row_error(err, columns, where, whole_row) from None


# How rows train otherwise than in verl's MultiTurnSFTDataset (`Example.unlike_verl`): the
# verb for one row and for more, then the rest of the sentence
_UNLIKE_VERL = {
    UNTRAINED: (
        ("trains", "train"),
        " here though verl's MultiTurnSFTDataset refuses such rows: rendered one turn at a"
        " time they are not the chat rendered whole (Qwen3's template gives the last"
        " assistant turn an empty <think> block), or the template cannot render a turn"
        " alone; here they train as the template renders the whole chat, such a block a"
        " target",
    ),
    MASKED: (
        ("trains", "train"),
        " other tokens than verl's MultiTurnSFTDataset: it leaves untrained only the"
        " generation prompt's length of each assistant turn rendered alone, which in a chat"
        " opening with an assistant turn is the system prompt the template puts first; here"
        " each assistant turn trains from after its generation prompt",
    ),
}


def _say_unlike_verl(unlike: list[tuple[str, str]], rows: int) -> None:
    """One note, on the main rank, of how many rows train otherwise than verl's
    MultiTurnSFTDataset trains them, and how, naming the first of each kind: a run ported
    from verl trained other targets than it did there, and nothing said so."""
    if not unlike or not _main_rank():
        return
    said = []
    for kind, ((one, more), how) in _UNLIKE_VERL.items():
        named = [where for where, unlike_kind in unlike if unlike_kind == kind]
        if named:
            verb = one if len(named) == 1 else more
            said.append(f"{len(named)} of {_rows(rows)} (first {named[0]}) {verb}{how}")
    log.warning("note: %s (docs/verl.md)", "; ".join(said))


def _main_rank() -> bool:
    """Whether this process is the launch's first rank (torchrun's RANK), or not launched."""
    return process_rank() == 0


def _rows(count: int, which: str = "") -> str:
    """`1 row`, `2 rows`, with `which` (`more `) before the noun."""
    return f"{count} {which}row{'' if count == 1 else 's'}"


def _say_untrained(untrained: list[tuple[str, bool]], rows: int, cfg: DataConfig) -> None:
    """Rows with no target token train nothing: a note naming the first, or, when no row
    has one, a refusal (the run trained 3 steps of loss 0.0000 and exit 0). Each is named
    with `data.truncation` as its reason where it cut the row's every response token off
    (True in `untrained`), else the chat template, which marked none of its tokens."""
    if not untrained:
        return
    first, truncated = untrained[0]
    what = (
        f"keeps no response token after data.truncation={cfg.truncation} to"
        f" data.max_length={cfg.max_length}"
        if truncated
        else "has no token the chat template marks as assistant output"
    )
    if len(untrained) == rows:
        remedy = "raise data.max_length" if truncated else "check the chat template"
        raise ChatFormatError(
            f"{first}: {what}, and so does every other row: nothing to learn; {remedy}"
        )
    if not _main_rank():
        return
    if len(untrained) == 1:
        log.warning("note: %s %s: it trains nothing", first, what)
    else:
        more = _rows(len(untrained) - 1, "more ")
        log.warning("note: %s %s (and %s): they train nothing", first, what, more)


def load_sft_splits(
    cfg: DataConfig, tokenizer: Any, seed: int, progress: bool
) -> tuple[RowTable[Example], RowTable[Example]]:
    """(train, validation) examples; validation from `val_files`, else a seeded `val_ratio`
    hold-out. Errors name a row by its file and its row there, wherever the split put it."""
    if not cfg.train_files:
        raise ConfigError("data.train_files: no training files given")
    read = columns_read(cfg)
    for path in [*cfg.train_files, *cfg.val_files]:  # a media column is not decoded
        refuse_media_columns(path)
    rows, origins = read_rows_refusing_media(cfg.train_files, read)  # and a later row's
    train_at: Sequence[int] = range(len(rows))
    if cfg.val_files:
        val_rows, val_origins = read_rows_refusing_media(cfg.val_files, read)
        val_at: Sequence[int] = range(len(val_rows))
    elif cfg.val_ratio > 0:
        order = list(range(len(rows)))
        random.Random(seed).shuffle(order)
        held = set(order[: held_out_count(cfg.val_ratio, len(rows), list(cfg.train_files))])
        val_at = sorted(held)
        train_at = [i for i in range(len(rows)) if i not in held]
        val_rows, val_origins = rows, origins
    else:
        val_rows, val_origins, val_at = [], origins, []

    say_which_trains(cfg, [(rows, origins), (val_rows if cfg.val_files else [], val_origins)])

    def tokenize_at(
        table: list, at: Sequence[int], where: RowOrigins, label: str
    ) -> RowTable[Example]:
        """The rows of `table` at `at`, each named in errors by its place in its file."""
        rows_at = [table[i] for i in at]
        return tokenize_rows(
            rows_at,
            cfg,
            tokenizer,
            lambda i: where(at[i]),
            progress,
            label,
            lambda i: where.whole_row(at[i], rows_at[i]),
        )

    train = tokenize_at(rows, train_at, origins, f"tokenize {','.join(cfg.train_files)}")
    label = f"tokenize {','.join(cfg.val_files) or 'validation split'}"
    return train, tokenize_at(val_rows, val_at, val_origins, label)
