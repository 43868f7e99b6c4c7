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
first row, a parquet file's footer, never a media byte (decoding a row group of geo3k's
images to find its first row holding one took several times the file's size in memory, and
a video longer than a row was refused as a broken row, not as media); it is followed in the
loaders by `read_rows_refusing_media`, which looks at every row as it is read: a text table
with geo3k's rows appended trained them as text.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Collection
from pathlib import Path
from typing import Any

from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.tensor_memory import reraise_if_out_of_memory
from trainer.data.files import (
    DataFileError,
    RowOrigins,
    columns_held,
    holds_a_value,
    read_rows_with_origins,
)

# each media column verl reads by default, and the verl key that names it
MEDIA_COLUMNS = {"images": "data.image_key", "videos": "data.video_key"}


def refuse_media_columns(path: str | os.PathLike) -> None:
    """Refuse (DataFileError) the data file at `path` where a media column holds a value
    (`holds_a_value`): a JSON table's first row, a parquet file's column unless its footer
    says it holds nothing (`_parquet_column_holds_a_value`). A parquet column all null (of
    the null type pandas writes for a column of Nones) or of empty lists holds none, as JSON
    nulls do (it was refused by its schema alone: verl's text rows, `images: []`, read as
    JSON and not as parquet)."""
    held = columns_held(path, MEDIA_COLUMNS)
    if Path(path).suffix.lower() == ".parquet":
        held = [column for column in held if _parquet_column_holds_a_value(path, column)]
    if held:
        raise DataFileError(_refusal(str(path), held[0]))


# rows read at a time where the footer says a parquet media column has no leaf value: its
# cells are then nulls and lists of them, a few bytes a row
_SHAPE_BATCH_ROWS = 65536


def _parquet_column_holds_a_value(path: str | os.PathLike, column: str) -> bool:
    """Whether a cell of `column` of the parquet file at `path` may hold a value, no media
    byte decoded. Of the null type: no. Else its footer: a leaf column chunk whose
    statistics say it holds a value, or has none (a file written without them), holds one,
    so does a file that cannot be read so. Where no leaf holds a value (every null and empty
    list, and a list of nulls, is a leaf's null) the cells' shape alone is read, which holds
    no media byte, to tell `[None]` from `[]`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with os.fdopen(safe_files.open_regular(path), "rb") as handle:
            table = pq.ParquetFile(handle)
            schema = table.schema_arrow
            if pa.types.is_null(schema.field(column).type):
                return False
            if _leaf_holds_a_value(table.metadata, schema, column):
                return True
            batches = table.iter_batches(batch_size=_SHAPE_BATCH_ROWS, columns=[column])
            return any(_shape_holds_a_value(batch.column(0)) for batch in batches)
    except Exception as err:  # pyarrow raises several types for a broken file
        reraise_if_out_of_memory(err)
        return True


def _leaf_holds_a_value(metadata: Any, schema: Any, column: str) -> bool:
    """Whether a leaf column chunk of `column` in a row group of the parquet footer
    `metadata` may hold a value: its statistics missing, or counting fewer nulls than
    values. The leaves are stored in the order of the fields of `schema`, each field's
    `_leaf_count` of them (a footer of other leaves may hold one)."""
    counts = [_leaf_count(field.type) for field in schema]
    if sum(counts) != metadata.num_columns:
        return True
    first = sum(counts[: schema.get_field_index(column)])
    leaves = range(first, first + counts[schema.get_field_index(column)])
    for group in range(metadata.num_row_groups):
        for leaf in leaves:
            chunk = metadata.row_group(group).column(leaf)
            stats = chunk.statistics
            if stats is None or not stats.has_null_count or stats.null_count != chunk.num_values:
                return True
    return False


def _leaf_count(kind: Any) -> int:
    """How many parquet leaf columns an arrow type is stored as."""
    import pyarrow as pa

    if pa.types.is_struct(kind):
        return sum(_leaf_count(kind.field(at).type) for at in range(kind.num_fields))
    if pa.types.is_map(kind):
        return _leaf_count(kind.key_type) + _leaf_count(kind.item_type)
    if _is_list(kind):
        return _leaf_count(kind.value_type)
    return 1


def _is_list(kind: Any) -> bool:
    """Whether the arrow type `kind` is a list of any length kind."""
    import pyarrow as pa

    return (
        pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
    )


def _shape_holds_a_value(cells: Any) -> bool:
    """Whether a cell of the arrow array `cells`, whose leaves are all null, holds a value
    as `holds_a_value` reads it: a list of at least one element (`[None]`), a struct of a
    field (`{'bytes': None}`), any other non-null cell (an empty map too: no media column
    is one)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = cells.type
    if pa.types.is_struct(kind) and kind.num_fields == 0:
        return False
    if _is_list(kind):
        return bool(pc.any(pc.greater(pc.list_value_length(cells), 0)).as_py())
    return bool(pc.any(pc.is_valid(cells)).as_py())


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
