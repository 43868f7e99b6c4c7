"""A parquet media column is judged from its footer where that tells (statistics: a cell
not null is a value for bytes; a chunk larger than its nulls and levels could be holds a
value, one of text over JSON_TEXT_MAX a value longer than that) and otherwise read a few
cells at a time up to the first value: a binary, text or list-of-bytes column of images
was read whole, in batches of thousands of rows, and a file of images took several times
its size in memory just to be refused."""

from __future__ import annotations

import base64
import contextlib
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mfsdp_ckpt.errors import MfsdpError
from trainer.data.media_columns import refuse_media_columns

# cells of 64 KiB (text: 87 KiB of base64, which the footer cannot tell from blank text)
# and of 1000 bytes (too small for the footer to tell), 40 MiB of either, incompressible
LARGE, SMALL = bytes(range(256)) * 256, bytes(range(250)) * 4
ROWS = {LARGE: 640, SMALL: 42_000}
KINDS = {
    "binary": (pa.binary(), lambda cell: cell),
    "text": (pa.string(), lambda cell: "data:image/png;base64," + base64.b64encode(cell).decode()),
    "list-of-binary": (pa.list_(pa.binary()), lambda cell: [cell]),
}
STATISTICS = pytest.mark.parametrize("statistics", [True, False], ids=["stats", "no-stats"])
# the most memory a judgement may take where cells are read, and by the footer alone
READ_BOUND, FOOTER_BOUND = 4 << 20, 256 << 10


@contextlib.contextmanager
def _peak() -> Iterator[list[int]]:
    """The most bytes held at once inside, by pyarrow's pool and by Python (a column chunk
    read through a Python file is held as Python bytes), appended to the list yielded."""
    before = pa.default_memory_pool()
    pool = pa.proxy_memory_pool(before)
    pa.set_memory_pool(pool)
    tracemalloc.start()
    peak: list[int] = []
    try:
        yield peak
    finally:
        peak.append(tracemalloc.get_traced_memory()[1] + pool.max_memory())
        tracemalloc.stop()
        pa.set_memory_pool(before)


def _images(path: Path, arrow: pa.DataType, cells: list, statistics: bool) -> Path:
    """`cells` as the `images` column of a file of one row group of many pages, neither
    compressed nor dictionary-encoded."""
    table = pa.table({"prompt": [f"q{at}" for at in range(len(cells))]})
    table = table.append_column("images", pa.array(cells, type=arrow))
    pq.write_table(
        table,
        path,
        write_statistics=statistics,
        compression="none",
        use_dictionary=False,
        write_batch_size=8,  # pages of 8 cells: a page is the least a reader decodes
    )
    return path


@STATISTICS
@pytest.mark.parametrize("size", ["large", "small"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_large_media_column_is_judged_in_little_memory(tmp_path, kind, size, statistics):
    arrow, make = KINDS[kind]
    cell = LARGE if size == "large" else SMALL
    cells = [None] * 3 + [make(cell)] * (ROWS[cell] - 3)  # a value from row 3 on
    path = _images(tmp_path / "images.parquet", arrow, cells, statistics)
    assert path.stat().st_size > 32 << 20
    with pytest.raises(MfsdpError, match="column 'images'"), _peak() as peak:
        refuse_media_columns(path)
    # bytes: a cell not null is a value; large cells: more than nulls take
    footer_tells = (kind == "binary" and statistics) or (kind != "text" and size == "large")
    assert peak[0] < (FOOTER_BOUND if footer_tells else READ_BOUND), peak[0]


@STATISTICS
def test_long_blank_text_the_footer_cannot_tell_holds_nothing(tmp_path, statistics):
    blank = " " * 60_000  # blank text up to JSON_TEXT_MAX holds nothing, however long
    path = _images(tmp_path / "blank.parquet", pa.string(), [blank, None] * 40, statistics)
    refuse_media_columns(path)
    longer = _images(tmp_path / "long.parquet", pa.string(), [blank * 2] * 80, statistics)
    with pytest.raises(MfsdpError, match="column 'images'"):
        refuse_media_columns(longer)  # text over JSON_TEXT_MAX is a value, read or not


@STATISTICS
def test_many_null_and_empty_list_cells_hold_nothing(tmp_path, statistics):
    path = _images(
        tmp_path / "none.parquet", KINDS["list-of-binary"][0], [None, []] * 50_000, statistics
    )
    refuse_media_columns(path)
