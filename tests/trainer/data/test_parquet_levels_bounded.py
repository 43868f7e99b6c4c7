"""The definition levels reader (`chunk_sets_a_cell`) answers from what a page header's
fields hold as parquet-cpp reads them, and its memory and time are bounded by the chunk,
whatever the headers claim: a field past i32 (which parquet-cpp cuts to its low 32 bits)
or a page of more cells than its chunk has left made config check say "no media" of a file
train refuses; a page's claimed size was allocated (1 GiB from a 59 KB file); and a chunk
of one-cell pages was walked in Python at a second a MB. Each leaves the chunk to the
caller's read of its cells (None), as train reads them."""

from __future__ import annotations

import os
import struct
import tracemalloc
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cli.config_check import check_config
from mfsdp_ckpt.errors import MfsdpError
from tests.support.lying_parquet import (
    chunk_replaced,
    data_page,
    footer_saying_all_null,
    run_of_levels,
)
from trainer.config import DataConfig
from trainer.data.parquet_levels import _PAGES, chunk_sets_a_cell
from trainer.data.sft_dataset import load_sft_splits

ROWS = 60
MESSAGES = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
PAGE_LIMIT = 1 << 10  # media_columns' bytes a cell


def _images(count: int) -> bytes:
    """The plain-encoded values of `count` one-byte images."""
    return (struct.pack("<i", 1) + b"x") * count


def _sft_file(path, compression: str = "none") -> str:
    """An SFT file of ROWS images of 900 bytes, its footer saying every image null."""
    images = pa.array([os.urandom(900) for _ in range(ROWS)], pa.binary())
    table = pa.table({"messages": [MESSAGES] * ROWS, "images": images})
    pq.write_table(table, path, compression=compression, use_dictionary=False)
    return str(footer_saying_all_null(path, 0))


def _check_and_train_agree(path: str, run_dir) -> None:
    """config check refuses `path` with train's own line."""
    with pytest.raises(MfsdpError) as loaded:
        load_sft_splits(DataConfig(train_files=[path]), None, 0, False)
    with pytest.raises(MfsdpError) as checked:
        check_config("sft", None, [f"data.train_files=[{path}]", f"trainer.run_dir={run_dir}"])
    assert str(checked.value) == str(loaded.value)
    assert str(checked.value).startswith(f"{path}: column 'images' (verl's data.image_key)")


def _levels_answer(path: str) -> bool | None:
    """`chunk_sets_a_cell` of the images chunk of `path`'s first row group."""
    metadata = pq.ParquetFile(path).metadata
    with open(path, "rb") as handle:
        chunk = metadata.row_group(0).column(metadata.num_columns - 1)
        return chunk_sets_a_cell(handle.fileno(), chunk, 1, PAGE_LIMIT)


@pytest.mark.parametrize(
    ("claimed", "set_", "body"),
    [(2**32 + 5, 0, b""), (5 + ROWS, 1, _images(ROWS))],
    ids=["past_i32", "past_the_chunk"],
)
def test_a_page_claiming_more_cells_than_read_leaves_the_cells_to_read(
    tmp_path, claimed, set_, body
):
    """A first page of 5 nulls and `claimed - 5` cells more, then a page of 55 images:
    pyarrow reads 5 nulls and 55 images of the ROWS, 2**32 + 5 cut to i32 (5) or the page
    cut to the chunk's cells; the levels reader leaves them to it."""
    path = _sft_file(tmp_path / "t.parquet")
    levels = run_of_levels(5, 0) + run_of_levels(claimed - 5, set_)
    pages = data_page(levels, claimed, body=body)
    pages += data_page(run_of_levels(55, 1), 55, body=_images(55))
    chunk_replaced(tmp_path / "t.parquet", 2, pages)
    images = pq.read_table(path).column("images")
    assert (len(images), images.null_count) == (ROWS, 5)
    assert _levels_answer(path) is None
    _check_and_train_agree(path, tmp_path)


def test_a_page_claiming_a_huge_size_allocates_nothing_of_it(tmp_path):
    """A zstd page of 60 nulls claiming 2**16 cells and 32 MiB, which it inflates to: the
    levels reader allocates none of it, and check refuses the file as train does."""
    path = _sft_file(tmp_path / "t.parquet", compression="zstd")
    inflated = struct.pack("<i", 2) + run_of_levels(ROWS, 0) + bytes(2**25 - 6)
    page = pa.Codec("zstd").compress(inflated).to_pybytes()
    chunk_replaced(tmp_path / "t.parquet", 2, data_page(b"", 2**16, size=2**25, body=page))
    told, peak = _peak_bytes(_levels_answer, path)
    assert (told, peak < 4 << 20) == (None, True)
    _check_and_train_agree(path, tmp_path)


@pytest.mark.parametrize(("codec", "told"), [("ZSTD", False), ("LZ4_RAW", None)])
def test_levels_of_a_page_are_read_in_bounded_memory_whatever_the_footer(tmp_path, codec, told):
    """A footer as large as its pages' claims (2**21 cells, 2**40 bytes): a page inflating
    to 32 MiB is read up to its levels where its codec streams (zstd), and not at all where
    it undoes a page whole (LZ4)."""
    cells = 1 << 21
    levels = run_of_levels(cells, 0)
    inflated = struct.pack("<i", len(levels)) + levels + bytes(2**25)
    body = pa.Codec(codec.lower()).compress(inflated).to_pybytes()
    page = data_page(b"", cells, size=len(inflated), body=body)
    (tmp_path / "chunk").write_bytes(page)
    chunk = _chunk(len(page), cells, codec)
    with open(tmp_path / "chunk", "rb") as handle:
        told_, peak = _peak_bytes(chunk_sets_a_cell, handle.fileno(), chunk, 1, PAGE_LIMIT)
    assert told_ is told
    assert peak < 4 << 20


def test_a_chunk_of_many_pages_is_walked_to_a_bound(tmp_path):
    """`_PAGES` pages of a null each are walked; a chunk of more is left to its cells, the
    page setting a cell past them unread (None, not False)."""
    null = data_page(run_of_levels(1, 0), 1)
    pages = null * _PAGES + data_page(run_of_levels(1, 1), 1, body=_images(1))
    (tmp_path / "chunk").write_bytes(pages)
    with open(tmp_path / "chunk", "rb") as handle:
        walked = chunk_sets_a_cell(handle.fileno(), _chunk(len(pages), _PAGES), 1, PAGE_LIMIT)
        past = chunk_sets_a_cell(handle.fileno(), _chunk(len(pages), _PAGES + 1), 1, PAGE_LIMIT)
    assert (walked, past) == (False, None)


def _chunk(stored: int, cells: int, codec: str = "UNCOMPRESSED") -> SimpleNamespace:
    """The footer metadata of a chunk of `cells` cells at the start of a file, stored as
    `stored` bytes compressed by `codec`, whose uncompressed size is said to be 2**40."""
    return SimpleNamespace(
        data_page_offset=0,
        dictionary_page_offset=None,
        total_compressed_size=stored,
        total_uncompressed_size=1 << 40,
        num_values=cells,
        compression=codec,
    )


def _peak_bytes(read, *args):
    """`read(*args)` and the most bytes held while it ran, by Python and by arrow."""
    pool = pa.proxy_memory_pool(pa.default_memory_pool())
    was = pa.default_memory_pool()
    pa.set_memory_pool(pool)
    tracemalloc.start()
    try:
        answer = read(*args)
        return answer, tracemalloc.get_traced_memory()[1] + pool.max_memory()
    finally:
        tracemalloc.stop()
        pa.set_memory_pool(was)
