"""Data files of verl's multimodal layout (geo3k's: an `images` column, `<image>` in the
prompt text) refused, naming the file and the column.

The models trained here read text alone, and rows are read through the columns the run
reads, so such a file trained text-only without a word: the policy was asked
"<image>Find x in figure 4" with no figure. verl reads the column its `data.image_key`
(`data.video_key`) names, `images` (`videos`) unless set; those keys are ignored here
(docs/verl.md), so the columns of those names are what marks such a file, as other verl
features that would be dropped are refused.

A column that holds nothing (null cells, empty lists, '': `holds_nothing`) is no media
column, in JSON as in parquet. `refuse_media_columns` looks cheaply (`mfsdp config check`
runs it, as do the loaders before they read a row): a JSON table's first row, a parquet
file's footer (null counts, a column chunk's size; one telling nothing held checked against
that size and the chunk's definition levels, as statistics may lie: `parquet_levels`), else
its column's cells read from its smallest leaf a few at a time up to the first holding a
value (decoding a row group of geo3k's images to find its first row holding one took
several times the file's size in memory, and a video longer than a row was refused as a
broken row, not as media); it is followed in the loaders by `read_rows_refusing_media`,
which looks at every row as it is read: a text table with geo3k's rows appended trained
them as text.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Collection
from pathlib import Path
from typing import Any

from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.tensor_memory import reraise_if_out_of_memory
from trainer.data.empty_cells import JSON_TEXT_MAX, holds_nothing
from trainer.data.files import DataFileError, RowOrigins, columns_held, read_rows_with_origins
from trainer.data.parquet_levels import chunk_sets_a_cell

# each media column verl reads by default, and the verl key that names it
MEDIA_COLUMNS = {"images": "data.image_key", "videos": "data.video_key"}


def refuse_media_columns(path: str | os.PathLike) -> None:
    """Refuse (DataFileError) the data file at `path` where a media column holds a value (a
    cell not `holds_nothing`): a JSON table's first row, a parquet file's column unless it
    holds nothing in every row (`_parquet_column_holds_a_value`). A parquet column all null
    (of the null type pandas writes for a column of Nones), of empty lists or of '' holds
    none, as JSON nulls do (it was refused by its schema alone: verl's text rows,
    `images: []`, read as JSON and not as parquet)."""
    held = columns_held(path, MEDIA_COLUMNS)
    if Path(path).suffix.lower() == ".parquet":
        held = [column for column in held if _parquet_column_holds_a_value(path, column)]
    if held:
        raise DataFileError(_refusal(str(path), held[0]))


# rows of a parquet media column read at a time at most where its footer cannot tell, and
# the bytes of its leaf read at a time (fewer rows where its cells are larger: an image
# column is read a few images at a time and stops at the first value)
_BATCH_ROWS = 4096
_BATCH_BYTES = 256 << 10


def _parquet_column_holds_a_value(path: str | os.PathLike, column: str) -> bool:
    """Whether a cell of `column` of the parquet file at `path` holds a value, no media byte
    read where the footer tells. Of the null type: no. Each row group's footer statistics
    tell first (`_footer_tells`), those telling none holds a value checked against each such
    group's definition levels (`_levels_tell`); the row groups they leave open are read from
    the column's smallest leaf (`_read_holds_a_value`), a few cells at a time until one
    holds a value: a file with or without statistics, honest or not, gets one answer. A
    file that cannot be read so holds one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with os.fdopen(safe_files.open_regular(path), "rb") as handle:
            # a buffered stream: a column chunk is read page by page, not whole
            table = pq.ParquetFile(handle, buffer_size=_BATCH_BYTES, pre_buffer=False)
            kind = table.schema_arrow.field(column).type
            if pa.types.is_null(kind):
                return False
            leaves = _leaves(table.metadata, table.schema_arrow, column)
            groups = range(table.metadata.num_row_groups)
            told = [_footer_tells(table.metadata.row_group(at), leaves, kind) for at in groups]
            if True in told:
                return True
            # a footer telling every cell null is checked against the chunk's definition
            # levels (`_levels_tell`): a footer whose statistics lie passed here while the
            # loader, reading every row, refused the file at the row (a dictionary's indexes
            # are too small for the chunk's size to tell, and were past the first cells read)
            fd = handle.fileno()
            for at in groups:
                if told[at] is False:
                    told[at] = _levels_tell(table, fd, at, leaves, kind)
            if True in told:
                return True
            return any(_read_holds_a_value(table, at, leaves) for at in groups if told[at] is None)
    except Exception as err:  # pyarrow raises several types for a broken file
        reraise_if_out_of_memory(err)
        return True


def _leaves(metadata: Any, schema: Any, column: str) -> range:
    """The indexes of the parquet leaf columns `column` is stored as in the footer
    `metadata`: the leaves are stored in the order of the fields of `schema`, each field's
    `_leaf_count` of them. A footer of other leaves is refused (ValueError)."""
    counts = [_leaf_count(field.type) for field in schema]
    if sum(counts) != metadata.num_columns:
        raise ValueError(f"{metadata.num_columns} leaves, the schema's {sum(counts)}")
    at = schema.get_field_index(column)
    return range(sum(counts[:at]), sum(counts[: at + 1]))


def _footer_tells(group: Any, leaves: range, kind: Any) -> bool | None:
    """Whether the row group whose footer metadata is `group`, of the column of arrow type
    `kind` stored as `leaves`, holds a value as its footer tells, or None where it does not.
    A list or struct holds one where a leaf value is counted by statistics or proved by its
    size (`_size_proves`: all leaves null leaves `[None]` or `[]` open); a flat column holds
    none where every cell is null and its size agrees (statistics saying so of a chunk its
    nulls could not fill are read), and one where a cell is not and every such cell is a
    value (bytes, numbers but floats: text may be '' and a float NaN) or where its size
    proves a value."""
    import pyarrow as pa

    chunks = [group.column(leaf) for leaf in leaves]
    if _is_nested(kind):
        proved = any(_counts_a_value(chunk) or _size_proves(chunk, 0) for chunk in chunks)
        return True if proved else None
    (chunk,) = chunks
    stats = chunk.statistics
    every = _every_cell_not_null_holds_a_value(kind)
    if stats is not None and stats.has_null_count:
        if stats.null_count == chunk.num_values:  # a size past nulls' says it lies: read
            return None if _size_proves(chunk, 0) else False
        if every:
            return True
    if every and _size_proves(chunk, 0):
        return True
    text = pa.types.is_string(kind) or pa.types.is_large_string(kind)
    return True if text and _size_proves(chunk, JSON_TEXT_MAX) else None


# the most bytes a leaf column chunk's pages take per value besides the values' own where
# no value is set (page headers, definition and repetition levels)
_LEVEL_BYTES = 1 << 10


def _size_proves(chunk: Any, longer_than: int) -> bool:
    """Whether the size of the leaf column chunk `chunk` (uncompressed, in the footer)
    proves a value of it set and longer than `longer_than` bytes: more than its levels and
    page headers could take with every value null, and (`longer_than`) values no longer
    than that, each also written twice in a page header (a page's least and greatest),
    could. Text over JSON_TEXT_MAX is a value: base64 images averaging over three times
    that a row are told by the footer, not read."""
    per_value = _LEVEL_BYTES + 3 * longer_than
    return _data_pages_size(chunk) > per_value * (chunk.num_values + 1)


def _data_pages_size(chunk: Any) -> int:
    """The bytes of the leaf column chunk `chunk`'s data pages, its dictionary page left out:
    a dictionary's entries are no cell's value (pandas' categorical column keeps every
    category after the rows using them are filtered out, and an all-null `images` column of
    an 81 MB file was read group by group, 26 s). The footer gives a dictionary page's
    stored size alone (the span before the first data page), so a chunk with one is
    measured by its stored sizes, which for pages of nulls are no more than their
    uncompressed ones: the size still proves only what it proved."""
    if not chunk.has_dictionary_page:
        return chunk.total_uncompressed_size
    dictionary = chunk.data_page_offset - (chunk.dictionary_page_offset or 0)
    if not 0 <= dictionary <= chunk.total_compressed_size:  # offsets no writer leaves
        return chunk.total_uncompressed_size
    return chunk.total_compressed_size - dictionary


def _every_cell_not_null_holds_a_value(kind: Any) -> bool:
    """Whether each cell of a flat arrow type `kind` holds a value unless null, as
    `_cells_hold_a_value` reads it: bytes (even empty), integers, booleans, times, decimals."""
    import pyarrow as pa

    return any(
        test(kind)
        for test in (
            pa.types.is_binary,
            pa.types.is_large_binary,
            pa.types.is_binary_view,
            pa.types.is_fixed_size_binary,
            pa.types.is_integer,
            pa.types.is_boolean,
            pa.types.is_temporal,
            pa.types.is_decimal,
        )
    )


def _read_holds_a_value(table: Any, group: int, leaves: range) -> bool:
    """Whether a cell of row group `group` of the parquet file `table`, of the column stored
    as `leaves`, holds a value, its cells read from its smallest leaf (a list's lengths read
    from its bytes' leaf where that is the only one) about `_BATCH_BYTES` at a time, up to
    the first batch holding a value."""
    metadata = table.metadata.row_group(group)
    chunks = [metadata.column(leaf) for leaf in leaves]
    smallest = min(chunks, key=lambda chunk: chunk.total_uncompressed_size)
    row_bytes = smallest.total_uncompressed_size // max(metadata.num_rows, 1)
    rows = max(1, min(_BATCH_ROWS, _BATCH_BYTES // max(row_bytes, 1)))
    batches = table.iter_batches(rows, row_groups=[group], columns=[smallest.path_in_schema])
    return any(_cells_hold_a_value(batch.column(0)) for batch in batches)


def _levels_tell(table: Any, fd: int, group: int, leaves: range, kind: Any) -> bool | None:
    """Whether a cell of row group `group` of the parquet file `table` (open as `fd`), of
    the flat column of arrow type `kind` stored as `leaves` (the one `_footer_tells` says
    holds nothing), holds a value as its definition levels tell (`chunk_sets_a_cell`, which
    reads levels alone, no dictionary and no value), or None where they do not: a cell set
    of text or floats may be '' or NaN, and pages it cannot read, are for the cells to tell."""
    (leaf,) = leaves
    chunk = table.metadata.row_group(group).column(leaf)
    levels = table.schema.column(leaf).max_definition_level
    set_ = chunk_sets_a_cell(fd, chunk, levels, _LEVEL_BYTES)
    return None if set_ and not _every_cell_not_null_holds_a_value(kind) else set_


def _counts_a_value(chunk: Any) -> bool:
    """Whether the footer's statistics of the leaf column `chunk` count a non-null value."""
    stats = chunk.statistics
    return stats is not None and stats.has_null_count and stats.null_count != chunk.num_values


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


def _is_nested(kind: Any) -> bool:
    """Whether the arrow type `kind` is a list, map or struct: a leaf value in a cell makes
    the cell hold a value."""
    import pyarrow as pa

    return _is_list(kind) or pa.types.is_map(kind) or pa.types.is_struct(kind)


def _is_list(kind: Any) -> bool:
    """Whether the arrow type `kind` is a list of any length kind."""
    import pyarrow as pa

    return (
        pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
    )


def _cells_hold_a_value(cells: Any) -> bool:
    """Whether a cell of the arrow array `cells` holds a value as `holds_nothing` reads a
    JSON cell, from its shape where it has one: a list or map of at least one item
    (`[None]`), a struct (`{'bytes': None}`), bytes (even empty: `holds_nothing` reads no
    bytes as nothing); text not blank and no JSON for nothing ('[]', 'null'), a number not
    NaN. Only text short enough to be JSON for nothing is made Python values."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = cells.type
    if pa.types.is_map(kind):
        return bool(pc.any(pc.greater(cells.value_lengths(), 0)).as_py())
    if _is_list(kind):
        return bool(pc.any(pc.greater(pc.list_value_length(cells), 0)).as_py())
    if _is_nested(kind) or pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return cells.null_count < len(cells)
    cells = cells.drop_null()
    text = pa.types.is_string(kind) or pa.types.is_large_string(kind)
    if text and pc.any(pc.greater(pc.binary_length(cells), JSON_TEXT_MAX)).as_py():
        return True
    return not all(holds_nothing(cell) for cell in cells.to_pylist())


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
    """Refuse the row `where` holding a value in one of the columns `media` (a cell not
    `holds_nothing`: an empty list or '' is none); drop them."""
    for column in media:
        if not holds_nothing(row.pop(column, None)):
            raise DataFileError(_refusal(where, column))


def _refusal(where: str, column: str) -> str:
    """The refusal of a media `column` of the file or row `where`, on one line."""
    return (
        f"{where}: column '{column}' (verl's {MEDIA_COLUMNS[column]}): multimodal rows are"
        " not supported, the models trained here read text alone (the prompts would"
        f" train without their {column}); drop the column to train on the text"
    )
