"""Data files of verl's multimodal layout (geo3k's: an `images` column, `<image>` in the
prompt text) refused, naming the file and the column.

The models trained here read text alone, and rows are read through the columns the run
reads, so such a file trained text-only without a word: the policy was asked
"<image>Find x in figure 4" with no figure. verl reads the column its `data.image_key`
(`data.video_key`) names, `images` (`videos`) unless set; those keys are ignored here
(docs/verl.md), so the columns of those names are what marks such a file, as other verl
features that would be dropped are refused.

A column that holds nothing (null cells, empty lists) is no media column, in JSON as in
parquet. `refuse_media_columns` looks cheaply (`mfsdp config check` runs it): a JSON table's
first row, a parquet file's media columns alone, up to the first row holding a value; it is
followed in the loaders by `read_rows_refusing_media`, which looks at every row as it is
read: a text table with geo3k's rows appended trained them as text.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Collection
from pathlib import Path
from typing import Any

from trainer.data.files import (
    DataFileError,
    RowOrigins,
    columns_held,
    holds_a_value,
    iter_file_rows,
    read_rows_with_origins,
)

# each media column verl reads by default, and the verl key that names it
MEDIA_COLUMNS = {"images": "data.image_key", "videos": "data.video_key"}


def refuse_media_columns(path: str | os.PathLike) -> None:
    """Refuse (DataFileError) the data file at `path` where a media column holds a value
    (`holds_a_value`): a JSON table's first row, a parquet file's rows read through that
    column until one holds a value. A parquet column all null (of the null type pandas
    writes for a column of Nones) or of empty lists holds none, as JSON nulls do: refused
    by its schema alone, verl's text rows (`images: []`) read as JSON and not as parquet."""
    held = columns_held(path, MEDIA_COLUMNS)
    if Path(path).suffix.lower() == ".parquet":
        held = [column for column in held if _parquet_column_holds_a_value(path, column)]
    if held:
        raise DataFileError(_refusal(str(path), held[0]))


def _parquet_column_holds_a_value(path: str | os.PathLike, column: str) -> bool:
    """Whether a row of the parquet file at `path` holds a value in `column`, reading that
    column alone and stopping at the first row that does (the rows' generator, dropped,
    closes the file)."""
    return any(holds_a_value(row.get(column)) for row, _ in iter_file_rows(path, (column,)))


def read_rows_refusing_media(
    paths: list[str], read: Collection[str]
) -> tuple[list[dict[str, Any]], RowOrigins]:
    """`read_rows_with_origins(paths, read)`, refusing (DataFileError naming file, row and
    column) the first row that holds a media value: each row is read through the media
    columns too, which a row then no longer holds."""
    media = tuple(name for name in MEDIA_COLUMNS if name not in read)
    refuse = functools.partial(_refuse_media_row, media)
    return read_rows_with_origins(paths, (*read, *media), refuse)


def _refuse_media_row(media: tuple[str, ...], row: dict[str, Any], where: str) -> None:
    """Refuse the row `where` holding a value in one of the columns `media` (`holds_a_value`:
    an empty list is none); drop them."""
    for column in media:
        if holds_a_value(row.pop(column, None)):
            raise DataFileError(_refusal(where, column))


def _refusal(where: str, column: str) -> str:
    """The refusal of a media `column` of the file or row `where`, on one line."""
    return (
        f"{where}: column '{column}' (verl's {MEDIA_COLUMNS[column]}): multimodal rows are"
        " not supported, the models trained here read text alone (the prompts would"
        f" train without their {column}); drop the column to train on the text"
    )
