"""Read table rows from parquet or jsonl files, and write them back (one reader for every
command)."""

from __future__ import annotations

import bisect
import collections
import contextlib
import errno
import itertools
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mfsdp_ckpt.check.printable import first_of
from mfsdp_ckpt.errors import MfsdpFailedError, MfsdpUsageError
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.format.closest_path import where_relative
from mfsdp_ckpt.format.hub_id import hub_id_hint
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.out_lock import ctrl_c_deferred
from mfsdp_ckpt.storage.temp_files import new_temp, temp_writer
from mfsdp_ckpt.storage.tensor_memory import memory_failure, reraise_if_out_of_memory
from mfsdp_ckpt.storage.unique_json import (
    DEFAULT_MAX_CONTAINERS,
    DuplicateKeyError,
    NestingError,
    first_lone_surrogate,
    json_problem,
    loads_unique,
    too_many_containers,
)
from trainer.data.empty_cells import holds_nothing
from trainer.data.json_errors import json_error_words

log = logging.getLogger(__name__)  # tables published, then the interrupt: one line

# Parquet stores a repeated value once (dictionary and run-length encoding) and compresses
# pages: a small file can hold millions of rows, or one long string repeated in each, that
# decode to gigabytes and far more once made Python objects. Decoding is bounded twice
# against a budget per byte of file: the footer's uncompressed sizes (what decompressing the
# pages makes), then each batch's rows with every repeated value counted once per use,
# computed from the dictionary's lengths before any value is copied. Real tables compress
# text several times over, and one prompt prefix shared by every row far more. Each cell is
# charged the Python object it becomes besides its bytes.
DECODED_PER_FILE_BYTE = 256
DECODED_FLOOR = 64 << 20
_CELL_BYTES = 64
_BATCH_ROWS = 16384
# A jsonl line is one row, read whole: longer than this it is no row of a table (a sparse
# file of zeros with no newline would be read whole into memory).
MAX_JSONL_LINE_BYTES = 64 << 20
# A parquet row is bounded alike, counted as decoded (`_decoded_bytes`): one cell of 450 MiB
# was within the budget of a 2.6 MB file and took 5.2 GB once made a row and copied.
MAX_ROW_BYTES = MAX_JSONL_LINE_BYTES
_LONG_ROW = f"more than {MAX_ROW_BYTES} bytes decoded; no row of a table is that long"
# Python holds each JSON object or array in tens to hundreds of bytes, `[]` takes 2 bytes of
# a line: a line of empty arrays takes many times its size in memory to parse. A row of a
# table holds a few (a chat: a list, an object per turn), so each JSON text parsed at once
# (a .jsonl line, a whole .json) may hold this many, counted before it is parsed
# (`too_many_containers`).
MAX_ROW_CONTAINERS = DEFAULT_MAX_CONTAINERS
# JSON's escape of a UTF-16 surrogate (`\ud800`): only through one can parsed text hold a
# lone surrogate (UTF-8 bytes cannot), so rows are searched for one only where it is.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


# The data formats read, by file suffix (any case); no compressed file is read.
DATA_SUFFIXES = (".parquet", ".jsonl", ".json")


class DataFileError(MfsdpUsageError, ValueError):
    """A data file is missing, unreadable or not the format its name says; the message names it."""


class EmptyTableError(MfsdpFailedError, ValueError):
    """A data file holds no rows (empty, only blank lines, `[]`): a run trained on it failed
    only at its batch size ("exceeds the 0 training rows"), naming no file, and `mfsdp data`
    converted it into empty tables a run fails on later."""

    every_rank = True  # every rank reads the same files: rank 0 says it, once


class DataMemoryError(MfsdpFailedError):
    """Reading a data file ran out of memory (exit 1); names the file, which may be fine:
    pyarrow's ArrowMemoryError was reported as "not a readable parquet file"."""


class DataWriteError(MfsdpFailedError):
    """The machine failed to write an output table (disk full, no permission); names it."""


def row_in_table(path: str | os.PathLike, index: int) -> str:
    """How an error names row `index` (0-based) of a table with no lines to number (parquet,
    a .json array): counted from 1, as a .jsonl row's line is, so that every row number a
    user reads counts alike (`t.parquet row 1` is the first row, `t.jsonl:1` the first
    line)."""
    return f"{path} row {index + 1}"


@dataclass(frozen=True)
class RowOrigins:
    """Where each row of files read one after another came from: an error about a row names
    its file and its place in that file, not its place among all rows (`a.jsonl,b.jsonl row
    45`). A row read from a line is named by that line, 1-based, as an error about the
    line's JSON names it (`b.jsonl:25`; blank lines are no rows, so the row's index is no
    line number); a parquet or .json array row by its place counted from 1
    (`row_in_table`)."""

    files: tuple[str, ...]
    starts: tuple[int, ...]  # the index of each file's first row among all rows
    lines: tuple[tuple[int, ...] | None, ...]  # each file's row lines; None: not read by line

    def __call__(self, index: int) -> str:
        file, local = self._place(index)
        lines = self.lines[file]
        if lines is None:
            return row_in_table(self.files[file], local)
        return f"{self.files[file]}:{lines[local]}"

    def _place(self, index: int) -> tuple[int, int]:
        """(the file row `index` came from, its index among that file's rows)."""
        file = bisect.bisect_right(self.starts, index) - 1
        return file, index - self.starts[file]

    def whole_row(self, index: int, read: dict[str, Any]) -> dict[str, Any]:
        """Row `index` with every column its file has, read again from the file: rows are
        read through the caller's columns only (`read_rows_with_origins`), and an error
        about a column a row lacks names what the row holds instead and what reads such a
        table (`table_kinds`). Read alone: its line, its parquet row group, or its .json;
        a JSON row's unread keys are not checked (`_jsonl_rows`'s `checked`), as they were
        not when it was read. A parquet row group refused read whole (an unread column past
        the budget: a compression bomb) gives the row as `read` with every other column of
        the file's schema, read without decoding a row, as None: the error named no
        column ("found: none") where the file has several."""
        file, local = self._place(index)
        path, lines = Path(self.files[file]), self.lines[file]
        parquet = lines is None and path.suffix.lower() == ".parquet"
        try:
            if lines is not None:
                return next(_jsonl_rows(path, None, only_line=lines[local], checked=read))[0]
            if parquet:
                return _read_parquet(path, only_row=local)
            return next(itertools.islice(_json_rows(path, None, checked=read), local, None))[0]
        except DataFileError:
            return {name: read.get(name) for name in _parquet_columns(path)} if parquet else read


def read_rows_with_origins(
    paths: list[str] | str,
    read: Collection[str] | None = None,
    refuse_row: Callable[[dict[str, Any], str], None] | None = None,
) -> tuple[list[dict[str, Any]], RowOrigins]:
    """All rows of the given files, in order, and where each row came from: `.parquet`,
    `.jsonl` (one object per line) or `.json` (an array of objects, one object, or one per
    line). A file holding no rows is refused (EmptyTableError), naming it. `read` names the
    columns the caller reads (None: all of them), and a row holds only those: a parquet
    file's other columns are never decoded (nor counted against its decoding budget), a
    JSON row's other keys are dropped as it is parsed. A column the run never reads (images,
    raw pages) cost memory for the whole run and could refuse a valid file as too big.
    `refuse_row(row, where)` sees each row as it is read, named as `RowOrigins` names it,
    and raises to refuse it: a file is refused at such a row, not once all are held."""
    rows: list[dict[str, Any]] = []
    files, starts, lines = [], [], []
    for path in [paths] if isinstance(paths, (str, os.PathLike)) else paths:
        files.append(str(path))
        starts.append(len(rows))
        found_lines: list[int] = []
        for row, line in iter_file_rows(path, read):
            if refuse_row is not None:
                local = len(rows) - starts[-1]
                refuse_row(row, row_in_table(path, local) if line is None else f"{path}:{line}")
            rows.append(row)
            if line is not None:
                found_lines.append(line)
        lines.append(tuple(found_lines) if found_lines else None)
    return rows, RowOrigins(tuple(files), tuple(starts), tuple(lines))


def iter_file_rows(
    path: str | os.PathLike, read: Collection[str] | None = None
) -> Iterator[tuple[dict[str, Any], int | None]]:
    """The rows of one data file as `read_rows_with_origins` reads them, one at a time, each
    with the 1-based line it was read from (None: not read by line, `row_in_table` names
    it), so a caller that writes each row out holds a batch of them, never the file's
    rows: converting a million-row file held them all, each made Python objects several
    times over. A file holding no rows is refused once read (EmptyTableError); running out
    of memory reading it is DataMemoryError naming it."""
    found = False
    for row, line in _rows_of_one(Path(path), read):
        found = True
        yield row, line
    if not found:
        raise EmptyTableError(
            f"{path}: holds no rows (an empty or cut-short file, or only blank lines?)"
        )


def check_data_file(path: str | os.PathLike) -> None:
    """Refuse (DataFileError) a data file that is not there, a directory (naming the files in
    it), not a regular file or of a format not read, without opening it: a command checks its
    inputs so before it names anything after one (`mfsdp data`'s split from a file's name)."""
    path = Path(path)
    if not os.path.lexists(path):
        hint = where_relative(path) + hub_id_hint(path, "--input ", dataset=True)
        raise DataFileError(f"{path}: no such file{hint}")
    if path.is_dir():
        raise DataFileError(_directory_given(path))
    try:  # a FIFO or a device would block the read or never end: say what is there
        safe_files.regular_file(path)
    except CheckpointFileError as err:
        raise DataFileError(str(err)) from None
    suffix = path.suffix.lower()
    if suffix not in DATA_SUFFIXES:
        raise DataFileError(
            f"{path}: unknown data format {suffix!r} (use .parquet, .jsonl or .json)"
        )


# Rows one at a time, each with its line (None: the file is not read by line).
RowsAndLines = Iterator[tuple[dict[str, Any], int | None]]


def _rows_of_one(path: Path, read: Collection[str] | None = None) -> RowsAndLines:
    """The file's rows; running out of memory reading them is DataMemoryError naming it."""
    check_data_file(path)
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            for batch in _parquet_batches(path, read):
                yield from ((row, None) for row in batch)
        elif suffix == ".jsonl":
            yield from _jsonl_rows(path, read)
        else:
            yield from _json_rows(path, read)
        return
    except Exception as err:
        if memory_failure(err) is None:
            raise
    # raised past the handler: the caught error's traceback holds what was read
    raise DataMemoryError(
        f"{path}: out of memory reading it; free memory or raise the process's limit (ulimit -v)"
    )


TABLE_SUFFIXES = (".parquet", ".jsonl")  # whole tables; a .json is as often a model's config
MAX_ENTRIES_LISTED = 10_000


def _directory_given(path: Path) -> str:
    """The error for a directory given as a data file (a dataset as the Hub downloads it:
    gsm8k/main/train-00000-of-00001.parquet): the files in it to give instead."""
    found = sorted(str(p) for p in data_files_in(path, levels=2))
    if not found:
        return f"{path}: a directory; give a data file (.parquet, .jsonl or .json)"
    shown = first_of([f"--input {name}" for name in found], 4, sep=" ")
    return f"{path}: a directory; give its data files, one --input each: {shown}"


def data_files_in(path: Path, levels: int) -> list[Path]:
    """Table files in `path` and `levels - 1` levels below, looking at no more than
    MAX_ENTRIES_LISTED entries in all (a hint must not walk a huge tree: `--input /`).
    Hidden names are passed over: a table's temp file while `mfsdp data` writes it, or
    macOS's `._train.parquet`, is no file to give; so is a training run's metrics.jsonl
    (`_run_log`), which `--input RUN` was offered as data."""
    found: list[Path] = []
    pending, seen = [(path, levels)], 0
    while pending:
        directory, left = pending.pop(0)
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    seen += 1
                    if seen > MAX_ENTRIES_LISTED:
                        return found
                    if entry.name.startswith(".") or _run_log(directory, entry.name):
                        continue
                    if entry.is_dir(follow_symlinks=False) and left > 1:
                        pending.append((Path(entry.path), left - 1))
                    elif Path(entry.name).suffix.lower() in TABLE_SUFFIXES:
                        found.append(Path(entry.path))
        except OSError:
            continue
    return found


def _run_log(directory: Path, name: str) -> bool:
    """Whether `name` in `directory` is a training run's metrics log: its metrics.jsonl
    beside the config.yaml or tracker the run writes there."""
    return name == layout.RUN_METRICS_FILE and any(
        os.path.isfile(directory / run_file)
        for run_file in (layout.RUN_CONFIG_FILE, layout.TRACKER_FILE)
    )


def _read_parquet(path: Path, only_row: int) -> dict[str, Any]:
    """Row `only_row` (0-based) of a parquet file, every column, one row group read."""
    return next(_parquet_batches(path, None, only_row))[0]


def _parquet_batches(
    path: Path, read: Collection[str] | None = None, only_row: int | None = None
) -> Iterator[list[dict[str, Any]]]:
    """The rows of a parquet file (their columns in `read`, None: all), batch by batch, read
    through a descriptor opened here: pyarrow given a path parses it as a URI, which fails on
    a name that is not UTF-8 and reads a name with a scheme (`s3:...`) somewhere else. A
    file of 0 bytes holds no rows, as an empty .jsonl does (no parquet writer makes one: a
    file created and never written). `only_row`: that row alone (0-based), one row group read."""
    try:
        handle = os.fdopen(safe_files.open_regular(path), "rb")
    except CheckpointFileError as err:
        raise DataFileError(str(err)) from None
    with handle:
        size = os.fstat(handle.fileno()).st_size
        if size == 0:
            return
        budget = max(DECODED_FLOOR, DECODED_PER_FILE_BYTE * size)
        try:
            yield from _bounded_rows(path, handle, budget, read, only_row)
        except DataFileError:
            raise
        except Exception as err:  # pyarrow raises several types for a broken file
            reraise_if_out_of_memory(err)  # ArrowMemoryError: the machine, not the file
            raise DataFileError(f"{path}: not a readable parquet file ({err})") from err


def _bounded_rows(
    path: Path,
    handle: Any,
    budget: int,
    read: Collection[str] | None,
    only_row: int | None = None,
) -> Iterator[list[dict[str, Any]]]:
    """The file's rows batch by batch, made of its columns in `read` (None: all), refused
    once decoding them would pass `budget` bytes, or one row MAX_ROW_BYTES. Only those
    columns are decoded and measured (`columns=`: pyarrow reads no page of another), so a
    column the run never reads costs neither memory nor budget. Every text column (nested
    ones too) is measured read as a dictionary, so a value repeated a million times is held
    once until it is known to fit. `only_row`: that row alone (one batch of one row), from
    its row group alone.

    Read one row group at a time: pyarrow cannot return a nested dictionary column for a
    batch crossing row groups (each group has its own dictionary), and a file written by
    `datasets` (1000 rows a group, verl's own) holds chat turns in many groups. A group of
    one batch is made rows from its measured batch. A larger group is measured whole, let go,
    then made rows from plain batches: read as dictionaries in batches, each batch held a
    new copy of every distinct value of the group read so far (time and memory growing with
    the group's square), and the rows were made while the group's dictionaries were held."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    footer = pq.ParquetFile(handle).metadata
    names = footer.schema.to_arrow_schema().names
    counts = collections.Counter(names)
    twice = next((name for name, count in counts.items() if count > 1), None)
    if twice is not None:  # a row is a dict: it kept the last of them, without a word
        raise DataFileError(f"{path}: column {twice!r} appears {counts[twice]} times")
    chosen = names if read is None else [name for name in names if name in read]
    leaves = _leaves_of(footer, chosen)
    _refuse_long_row_groups(path, footer, leaves)
    groups, start = _row_groups(footer, only_row)
    measure = _DecodeBudget(path, budget)
    pages = sum(
        footer.row_group(group).column(leaf).total_uncompressed_size
        for group in groups
        for leaf in leaves
    )
    if pages > budget:
        raise measure.too_big(pages)
    texts = [
        footer.schema.column(leaf).path
        for leaf in leaves
        if footer.schema.column(leaf).physical_type == "BYTE_ARRAY"
    ]
    handle.seek(0)
    dictionaries = pq.ParquetFile(handle, read_dictionary=texts)
    plain = pq.ParquetFile(handle)
    done, picked = 0, []  # rows of `groups` made so far; those of `only_row`'s group
    for group in groups:
        if footer.row_group(group).num_rows <= _BATCH_ROWS:
            batches = dictionaries.iter_batches(_BATCH_ROWS, row_groups=[group], columns=chosen)
            per_batch = True
        else:
            measure.table(dictionaries.read_row_group(group, columns=chosen), start + done)
            pa.default_memory_pool().release_unused()  # the dictionaries' memory, for the rows
            batches = plain.iter_batches(_BATCH_ROWS, row_groups=[group], columns=chosen)
            per_batch = False
        for batch in batches:
            if per_batch:  # a small group: measured as it is read
                measure.batch(batch, first_row=start + done)
            done += batch.num_rows
            if only_row is None:
                yield _rows_of(path, batch)
            else:
                picked += _rows_of(path, batch)
    if only_row is not None:
        yield [picked[only_row - start]]


def parquet_first_group_is_one_batch(path: str | os.PathLike) -> bool:
    """Whether the first row group of the parquet file at `path` is read as one batch (a
    larger group is decoded whole to be measured before its rows are made), from its footer
    alone; a file whose footer cannot be read is for the reader to refuse (True)."""
    import pyarrow.parquet as pq

    try:
        with os.fdopen(safe_files.open_regular(Path(path)), "rb") as handle:
            footer = pq.ParquetFile(handle).metadata
    except Exception:  # an empty or broken file: the reader says what is wrong with it
        return True
    return footer.num_row_groups == 0 or footer.row_group(0).num_rows <= _BATCH_ROWS


def _leaves_of(footer: Any, names: list[str]) -> list[int]:
    """The footer's columns (leaves: a struct or list column is stored as one per field)
    of the top-level columns `names`. A leaf's path is its column's name and fields joined
    by dots; a name holding a dot may take another column's leaves too, which only counts
    more against the budget, never less."""
    return [
        leaf
        for leaf in range(footer.num_columns)
        if any(
            path == name or path.startswith(f"{name}.")
            for path in [footer.schema.column(leaf).path]
            for name in names
        )
    ]


def _row_groups(footer: Any, only_row: int | None) -> tuple[list[int], int]:
    """(the row groups to read, the file's index of their first row): every group, or the
    one holding row `only_row`."""
    if only_row is None:
        return list(range(footer.num_row_groups)), 0
    start = 0
    for group in range(footer.num_row_groups):
        rows = footer.row_group(group).num_rows
        if only_row < start + rows:
            return [group], start
        start += rows
    raise IndexError(f"row {only_row} is past the file's {start} rows")


def columns_held(path: str | os.PathLike, names: Collection[str]) -> list[str]:
    """Which of the columns `names` the data file at `path` has, read cheaply: a parquet
    file's schema (no page is read), a JSON table's first row through `names` alone, a key
    that holds nothing there (`holds_nothing`) not counted."""
    if Path(path).suffix.lower() == ".parquet":
        return [name for name in _parquet_columns(Path(path)) if name in names]
    row, _ = next(iter_file_rows(path, names))  # dropped, the generator closes the file
    return [name for name in names if not holds_nothing(row.get(name))]


def _parquet_columns(path: Path) -> list[str]:
    """The names of the columns of the parquet file at `path`, from its footer's schema:
    no page is read. Its file refused (gone, changed to no parquet file since its rows were
    read): none."""
    import pyarrow.parquet as pq

    try:
        with os.fdopen(safe_files.open_regular(path), "rb") as handle:
            return list(pq.ParquetFile(handle).schema_arrow.names)
    except Exception as err:  # pyarrow raises several types for a broken file
        reraise_if_out_of_memory(err)
        return []


def _rows_of(path: Path, batch: Any) -> list[dict[str, Any]]:
    """The rows of a measured `batch`, made from plain arrays: faster than from dictionary
    ones, which a column stored as a dictionary type is read as even when not asked to."""
    if not batch.num_columns:  # none of the columns read is in the file
        return [{} for _ in range(batch.num_rows)]
    plain = batch.cast(_without_dictionaries(batch.schema))
    values = [_values(path, field, column) for field, column in zip(plain.schema, plain.columns)]
    names = plain.schema.names
    return [dict(zip(names, cells, strict=True)) for cells in zip(*values, strict=True)]


def _values(path: Path, field: Any, column: Any) -> list[Any]:
    """`column`'s Python values. A column pyarrow cannot make them of (a nanosecond timestamp
    that is not a whole microsecond, the default timestamp of pandas' `to_parquet`) is
    refused naming it: pyarrow's error said the file was unreadable and to install pandas.
    Only the columns the run reads are made values, so no other is refused."""
    try:
        return column.to_pylist()
    except (ValueError, TypeError, NotImplementedError) as err:
        why = str(err).split(". Install pandas")[0].rstrip(".")  # pyarrow's advice: no fix
        raise DataFileError(
            f"{path}: column {field.name!r} ({field.type}) holds values Python"
            f" cannot hold ({why}); store them another way (a timestamp in"
            " microseconds, or as text)"
        ) from None


class _DecodeBudget:
    """What the rows of a file decode to so far, refused past its budget (a compression
    bomb) or at the first row of more than MAX_ROW_BYTES, named by its place in the file."""

    def __init__(self, path: Path, budget: int) -> None:
        self.path, self.budget, self.decoded = path, budget, 0

    def too_big(self, amount: int) -> DataFileError:
        return DataFileError(
            f"{self.path}: decodes to more than {self.budget} bytes ({DECODED_PER_FILE_BYTE}"
            f" per byte of file, {amount} or more): not a table of rows (a compression bomb?)"
        )

    def batch(self, batch: Any, first_row: int) -> None:
        """Charge `batch`, whose first row is row `first_row` (0-based) of the file."""
        size = _batch_bytes(batch)
        self.decoded += size
        if self.decoded > self.budget:
            raise self.too_big(self.decoded)
        long_row = _first_long_row(batch, size)
        if long_row is not None:
            raise DataFileError(f"{row_in_table(self.path, first_row + long_row)}: {_LONG_ROW}")

    def table(self, table: Any, first_row: int) -> None:
        """Charge `table` (one row group, its dictionaries shared by every batch of it)
        batch by batch; it is let go on return, before its rows are made."""
        for batch in table.to_batches(_BATCH_ROWS):
            self.batch(batch, first_row)
            first_row += batch.num_rows


def _refuse_long_row_groups(path: Path, footer: Any, leaves: list[int]) -> None:
    """Refuse, from the footer and before any page is read, a row group whose uncompressed
    data in the columns read (`leaves`) is more than MAX_ROW_BYTES a row: at least one of
    its rows is (the average row is). One row of hundreds of MiB compresses to a few MB;
    decoding its page alone takes its size, twice over."""
    first = 0
    for group in range(footer.num_row_groups):
        meta = footer.row_group(group)
        size = sum(meta.column(leaf).total_uncompressed_size for leaf in leaves)
        if meta.num_rows and size > MAX_ROW_BYTES * meta.num_rows:
            if meta.num_rows == 1:
                raise DataFileError(f"{row_in_table(path, first)}: {_LONG_ROW}")
            raise DataFileError(
                f"{path} rows {first + 1}-{first + meta.num_rows}: {size}"
                f" bytes uncompressed, more than {MAX_ROW_BYTES} a row on average; no row of a"
                " table is that long"
            )
        first += meta.num_rows


def _batch_bytes(batch: Any) -> int:
    """What the rows of `batch` take decoded (`_decoded_bytes`), each cell and each row (the
    dict it becomes) charged the Python object it becomes besides: a file of millions of
    rows in no column the run reads made millions of empty rows, charged nothing."""
    cells = _CELL_BYTES * batch.num_rows * (batch.num_columns + 1)
    return cells + sum(_decoded_bytes(column) for column in batch.columns)


def _first_long_row(batch: Any, size: int) -> int | None:
    """The index in `batch` (of `size` bytes, `_batch_bytes`) of its first row of more than
    MAX_ROW_BYTES decoded, None when there is none, found by halving: only a part over
    MAX_ROW_BYTES can hold such a row, and a part is measured without copying a value, so a
    few dozen measures find it among thousands of rows."""
    if size <= MAX_ROW_BYTES:
        return None
    if batch.num_rows == 1:
        return 0
    half = batch.num_rows // 2
    for start, part in ((0, batch.slice(0, half)), (half, batch.slice(half))):
        found = _first_long_row(part, _batch_bytes(part))
        if found is not None:
            return start + found
    return None


def _without_dictionaries(schema: Any) -> Any:
    """`schema` with every dictionary type (nested ones too) as its value type: rows are
    made faster from plain arrays, and once `_decoded_bytes` is known, writing the values
    out is safe."""
    import pyarrow as pa

    def plain(kind: Any) -> Any:
        if pa.types.is_dictionary(kind):
            return plain(kind.value_type)
        if pa.types.is_struct(kind):
            return pa.struct([field.with_type(plain(field.type)) for field in kind])
        if pa.types.is_map(kind):
            return pa.map_(plain(kind.key_type), plain(kind.item_type))
        if pa.types.is_fixed_size_list(kind):
            return pa.list_(kind.value_field.with_type(plain(kind.value_type)), kind.list_size)
        if pa.types.is_list(kind) or pa.types.is_large_list(kind):
            inner = kind.value_field.with_type(plain(kind.value_type))
            return pa.list_(inner) if pa.types.is_list(kind) else pa.large_list(inner)
        return kind

    return pa.schema([field.with_type(plain(field.type)) for field in schema])


def _decoded_bytes(array: Any) -> int:
    """The bytes `array` takes with each dictionary value written out once per use (and 8
    per list entry or text value for offsets), computed without writing any out, and
    _CELL_BYTES for each Python object a nested value becomes: an entry of a list, a field
    of a struct (a dict). Charged only its offsets, an empty list inside a list cost 8 bytes
    and became a Python list many times that size: a file of a few hundred bytes holding
    millions of them took far more memory than the floor allows while within it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = array.type
    if pa.types.is_dictionary(kind):
        values = array.dictionary
        text = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary)
        if not any(is_kind(values.type) for is_kind in (*text, pa.types.is_large_binary)):
            return len(array) * (values.nbytes // max(1, len(values)) + 1)  # widths alike
        lengths = pc.take(pc.binary_length(values), array.indices)
        return int(pc.sum(lengths).as_py() or 0) + 8 * len(array)
    if pa.types.is_struct(kind):
        fields = array.flatten()
        return _CELL_BYTES * len(array) * len(fields) + sum(map(_decoded_bytes, fields))
    if pa.types.is_map(kind):  # list_flatten takes no map: its entries as a list of structs
        entries = pa.struct([kind.key_field, kind.item_field])
        return _decoded_bytes(array.cast(pa.list_(pa.field("entries", entries))))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        values = pc.list_flatten(array)
        return 8 * len(array) + _CELL_BYTES * len(values) + _decoded_bytes(values)
    return int(array.nbytes)


def _json_rows(
    path: Path, read: Collection[str] | None, checked: Collection[str] | None = None
) -> RowsAndLines:
    """A `.json` file: one document, an array of objects (what pandas' `to_json(orient=
    "records")` and `json.dump(rows)` write) or a single object (one MATH problem file, often
    pretty-printed); else one object per line, as a `.jsonl` (datasets' `to_json` writes
    lines under this name). Read line by line, the first two were "line 1: not valid JSON".
    A file past MAX_JSONL_LINE_BYTES is read as lines only (each bounded), so a huge or sparse
    file is never read whole; an array that large is refused, naming .jsonl. A row keeps
    only its keys in `read` (None: all); `checked`, where given, names the keys searched
    for a lone surrogate (`_refuse_lone_surrogate`), else those kept."""
    with open(path, "rb") as handle:
        raw = handle.read(MAX_JSONL_LINE_BYTES + 1)
    if len(raw) > MAX_JSONL_LINE_BYTES:
        if raw.lstrip().startswith(b"["):
            raise DataFileError(
                f"{path}: a JSON array of more than {MAX_JSONL_LINE_BYTES} bytes; write its"
                " rows one object per line (.jsonl)"
            )
        yield from _jsonl_rows(path, read, checked=checked)
        return
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        yield from _jsonl_rows(path, read, checked=checked)  # names the line holding the bad bytes
        return
    crowded = too_many_containers(text, MAX_ROW_CONTAINERS, "one .json document")
    if crowded is not None:
        if text.lstrip().startswith("["):
            raise DataFileError(f"{path}: {crowded}; write its rows one object per line (.jsonl)")
        yield from _jsonl_rows(path, read, checked=checked)  # one object per line, bounded alike
        return
    try:
        document = loads_unique(text)
    except DuplicateKeyError as err:
        raise DataFileError(f"{path}: {err} in one object") from None
    except json.JSONDecodeError as err:
        if text.lstrip().startswith("["):  # an array cut short or broken: not lines
            raise DataFileError(f"{path}: not valid JSON ({json_error_words(err, text)})") from err
        yield from _jsonl_rows(path, read, checked=checked)
        return
    except NestingError:  # before ValueError, which it is: no integer line to name
        raise DataFileError(f"{path}: JSON nested too deeply") from None
    except ValueError as err:  # an integer past Python's digit limit, which json cannot place
        where = f"{path}:{_huge_integer_line(text)}"
        raise DataFileError(f"{where}: not valid JSON ({json_problem(err)})") from None
    rows = document if isinstance(document, list) else [document]
    escaped = _SURROGATE_ESCAPE.search(text) is not None
    del raw, document, text  # each row's unread keys go with it, below
    for index, row in enumerate(rows):
        if not isinstance(row, dict):
            raise DataFileError(
                f"{row_in_table(path, index)}: not a JSON object ({type(row).__name__});"
                " expected an array of objects, one object, or one per line"
            )
        rows[index] = None  # the caller's copy, kept or written out, is the only one
        row = _kept(row, read)
        if escaped:
            _refuse_lone_surrogate(_kept(row, checked), row_in_table(path, index))
        yield row, None


def _kept(row: dict[str, Any], read: Collection[str] | None) -> dict[str, Any]:
    """`row` with only its keys in `read` (None: all of them)."""
    return row if read is None else {key: value for key, value in row.items() if key in read}


def _huge_integer_line(text: str) -> int:
    """The line of the first run of more digits than Python reads as an integer (json's
    error names no place), 1 when none is found."""
    found = re.search(rf"[0-9]{{{sys.get_int_max_str_digits() + 1},}}", text)
    return text.count("\n", 0, found.start()) + 1 if found else 1


def _refuse_lone_surrogate(row: dict[str, Any], where: str) -> None:
    """Refuse a row holding a lone UTF-16 surrogate (`"a\\ud800b"` in JSON), naming the row,
    the field and the character, when the file is read: no text holds one, so writing the
    table (pyarrow) failed with a traceback, and training blamed the chat template."""
    found = first_lone_surrogate(row)
    if found is not None:
        field, index, character = found
        raise DataFileError(
            f"{where}: {field} holds {character!r} at character {index}, a lone UTF-16"
            " surrogate (half of a \\u escape pair), which is no text"
        )


def _jsonl_rows(
    path: Path,
    read: Collection[str] | None,
    only_line: int | None = None,
    checked: Collection[str] | None = None,
) -> RowsAndLines:
    """One JSON object per line, each keeping its keys in `read` (None: all), and the line
    of each; lines are decoded one by one so bad bytes name their line. `only_line`: the
    row of that line (1-based) alone, the others not parsed. `checked`: the keys searched
    for a lone surrogate (None: those kept): a row read again whole for an error
    (`RowOrigins.whole_row`) is checked as it was read, through the columns the run reads.
    A key given twice in an object is refused (Python's json keeps the last silently). A
    UTF-8 byte order mark opening the file (Windows editors and PowerShell write one) is no
    content and is skipped, as `utf-8-sig` would; Python's json refuses it."""
    with open(path, "rb") as handle:
        for number, raw in enumerate(iter(_line_reader(handle), b""), 1):
            if len(raw) > MAX_JSONL_LINE_BYTES:
                raise DataFileError(
                    f"{path}:{number}: a line of more than {MAX_JSONL_LINE_BYTES} bytes; "
                    "no row of a table is that long"
                )
            crowded = too_many_containers(raw, MAX_ROW_CONTAINERS, "a row")
            if crowded is not None:
                raise DataFileError(f"{path}:{number}: {crowded}")
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise DataFileError(
                    f"{path}:{number}: not UTF-8 text (byte {err.start} of the line)"
                ) from None
            if not line.strip() or only_line not in (None, number):
                continue
            try:
                row = loads_unique(line)
            except DuplicateKeyError as err:  # json keeps the last silently: which was meant?
                raise DataFileError(f"{path}:{number}: {err} in one object") from None
            except json.JSONDecodeError as err:
                raise DataFileError(
                    f"{path}:{number}: not valid JSON ({json_error_words(err, line)})"
                ) from err
            except NestingError:  # `[[[[...` thousands deep: no row of a table is
                raise DataFileError(f"{path}:{number}: JSON nested too deeply") from None
            except ValueError as err:  # an integer past Python's digit limit (4300)
                raise DataFileError(
                    f"{path}:{number}: not valid JSON ({json_problem(err)})"
                ) from None
            if not isinstance(row, dict):
                raise DataFileError(f"{path}:{number}: expected a JSON object per line")
            row = _kept(row, read)
            if _SURROGATE_ESCAPE.search(line):
                _refuse_lone_surrogate(_kept(row, checked), f"{path}:{number}")
            yield row, number


def _line_reader(handle: Any) -> Any:
    """Read the next line, at most one byte past MAX_JSONL_LINE_BYTES of it."""
    return lambda: handle.readline(MAX_JSONL_LINE_BYTES + 1)


# Rows written as one row group of a table, at most: a table written a batch at a time
# holds one batch of rows in memory, never the whole table.
BATCH_ROWS = 8192


def write_tables(tables: dict[Path, Iterable[dict[str, Any]]], *, replace: bool = True) -> None:
    """Write every table, or none (`staged_tables`). A list of rows is written as one row
    group, its columns' types found from all its rows; any other iterable (a generator) a
    batch of BATCH_ROWS at a time, never held whole, its types found from its first batch:
    a million synthetic problems took 2 GB made lists."""
    with staged_tables(replace=replace) as staged:
        for path, rows in tables.items():
            if isinstance(rows, list):
                staged.write(path, rows)
                continue
            schema, left = None, iter(rows)
            while batch := list(itertools.islice(left, BATCH_ROWS)):
                staged.write(path, batch, schema)
                schema = staged.schema(path)
            if schema is None:  # no rows: an empty table, as of an empty list
                staged.write(path, [])


@contextlib.contextmanager
def staged_tables(*, replace: bool = True) -> Iterator[StagedTables]:
    """Tables written batch by batch in the `with` block (`StagedTables.write`), then all
    published, or none: each goes to a hidden temp file beside its path first and all are
    renamed into place only once every one is written and the block ended without error.
    A full disk, a bad input row or Ctrl-C halfway must not leave `sft/train.parquet` new
    and `rl/train.parquet` missing or cut short, a set that a trainer reads as complete.
    The temp files are made new under random names (`temp_files.new_temp`): a symlink
    placed at the name of one, when it was made of the pid, had the table written into the
    file it led to and was then published as the table. Temps that a killed run left
    behind (their writer is gone) are removed here; readers skip hidden files meanwhile.

    `replace=False`: a file found at a path is never replaced, not even one that appeared
    after `refuse_replacing` looked (each table is published by a hard link, which fails
    when the name is taken); the tables published before it are removed again."""
    staged = StagedTables()
    published: list[Path] = []
    try:
        yield staged
        staged.finish()
        _publish_all(staged.temps, replace, published)
    except BaseException:
        for path in published:  # new names of this run's only: nothing that was there before
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        raise
    finally:
        staged.close()
        for temp in staged.temps.values():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)


class StagedTables:
    """The temp files of the tables `staged_tables` writes, each open to a parquet writer
    that takes its rows a batch (one row group) at a time: a table is never held whole, as
    a million-row conversion held it, several times over in Python objects."""

    def __init__(self) -> None:
        self.temps: dict[Path, Path] = {}  # each table's temp file, in the order begun
        self._writers: dict[Path, tuple[Any, Any]] = {}  # (parquet writer, its file)

    def write(self, path: Path, rows: Iterable[dict[str, Any]], schema: Any = None) -> None:
        """Add `rows` to the table at `path` as one row group; its first rows make its temp
        file. `schema`: the table's columns (a pyarrow schema), the same for every batch;
        None: those of these rows, as `pyarrow.Table.from_pylist` finds them."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pylist(list(rows), schema=schema)
        opened = self._writers.get(path)
        if opened is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            _remove_dead_temps(path)
        try:  # through a handle: pyarrow parses a path as a URI (see _parquet_batches)
            if opened is None:
                self.temps[path], fd = new_temp(path)
                handle = os.fdopen(fd, "wb")
                try:
                    writer = pq.ParquetWriter(handle, table.schema)
                except BaseException:
                    handle.close()
                    raise
                opened = self._writers[path] = (writer, handle)
            opened[0].write_table(table)
        except OSError as err:
            raise _not_written(path, err) from None

    def schema(self, path: Path) -> Any:
        """The columns of the table at `path`, as its first rows set them."""
        return self._writers[path][0].schema

    def finish(self) -> None:
        """Close every table's writer and file: a failure to finish one (a full disk) is
        DataWriteError naming it."""
        while self._writers:
            path, (writer, handle) = next(iter(self._writers.items()))
            del self._writers[path]
            try:
                with handle:
                    writer.close()
            except OSError as err:
                raise _not_written(path, err) from None

    def close(self) -> None:
        """Close what is still open, after a failure: its temp file is removed."""
        for writer, handle in self._writers.values():
            with contextlib.suppress(Exception), handle:
                writer.close()
        self._writers.clear()


def _not_written(path: Path, err: OSError) -> DataWriteError:
    reason = os.strerror(err.errno) if err.errno else str(err)
    return DataWriteError(f"{path}: not written ({reason}); none of this run's files were kept")


def _publish_all(staged: dict[Path, Path], replace: bool, published: list[Path]) -> None:
    """Rename each finished temp file in `staged` to its table, with Ctrl-C and SIGTERM held
    back (`ctrl_c_deferred`): one landing between two renames left `sft/train.parquet` new
    beside the old `rl/test.parquet` (a held-out split overlapping the new train split).
    A signal that came meanwhile is raised once every table is in place, after a line
    saying so: "error: interrupted" alone read as nothing written. `published` gets the new
    names (`replace=False`) until all are in place, for the caller to remove on a failure
    part way; once they are, it is emptied: they stay, whatever is raised after."""
    in_place = False
    try:
        with ctrl_c_deferred():
            for path, temp in staged.items():
                if replace:
                    os.replace(temp, path)
                else:
                    _publish_new(temp, path)
                    published.append(path)
            published.clear()
            in_place = True
    except KeyboardInterrupt:
        if in_place:
            log.warning(
                "warning: interrupted while the tables were put in place, and stopped once all"
                " were: every table is this run's, complete (%s)",
                first_of([str(path) for path in staged], 3),
            )
        raise


# A file system that has no hard links (FAT, some network and FUSE mounts) says so thus.
_NO_HARD_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EMLINK}


def _publish_new(temp: Path, path: Path) -> None:
    """Give the finished `temp` the name `path`, which must be free: link(2) is atomic and
    fails when the name is taken. Where there are no hard links, a name found free is
    renamed onto (a file appearing in between would be replaced: the only gap left)."""
    try:
        os.link(temp, path, follow_symlinks=False)
        return
    except FileExistsError:
        raise _appeared(path) from None
    except OSError as err:
        if err.errno not in _NO_HARD_LINKS:
            raise
    if os.path.lexists(path):
        raise _appeared(path)
    os.rename(temp, path)


def _appeared(path: Path) -> DataFileError:
    return DataFileError(f"{path}: appeared while this command ran; left as it is, nothing written")


def refuse_replacing(paths: list[Path], overwrite: bool) -> None:
    """Refuse (one line naming the first) to write a table where a file is already: it may
    be a user's own data (was: silently replaced). With `overwrite` files are replaced, but
    never a directory (its contents are not this command's to delete). The parents the
    tables go in must be directories."""
    for path in paths:
        for parent in (path.parent, path.parent.parent):
            if os.path.lexists(parent) and not os.path.isdir(parent):
                raise DataFileError(f"{parent}: is a file, not a directory; choose another --out")
        if not os.path.lexists(path):
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            raise DataFileError(
                f"{path}: is a directory, not a table; --overwrite replaces only files"
                " (move it away, or choose another --out)"
            )
        if not overwrite:
            raise DataFileError(f"{path}: already exists (pass --overwrite to replace it)")


def _remove_dead_temps(path: Path) -> None:
    """The temp files of `path` (`temp_files.new_temp`) whose writer no longer runs."""
    for entry in os.scandir(path.parent):
        pid = temp_writer(path, entry.name)
        if pid is not None and not _running(pid):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True
