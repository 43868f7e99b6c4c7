"""`mfsdp data gsm8k|math` converts its inputs a batch of rows at a time, each batch written
as one row group of each table, so its memory does not grow with the rows converted: a
million-row file took 2.6 KB of memory a row (2.65 GB for a 43 MB jsonl) when every row,
converted twice over, was held until the tables were written. Batching changes nothing
in the tables: the same rows in the same order, indices counting on across batches and
shards, an error naming the file and line of its row, and nothing left behind by it."""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.data_tables import read_rows, write_parquet
from trainer.data import files, math_datasets
from trainer.data.files import DataFileError
from trainer.data.math_datasets import convert_files, math_rows


def _problems(count: int, first: int = 0) -> list[dict[str, str]]:
    return [
        {"problem": f"What is {i} + {i}? " * 4, "solution": f"It is \\boxed{{{2 * i}}}."}
        for i in range(first, first + count)
    ]


def _jsonl(path: Path, rows: list[dict[str, str]]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def _peak_converting(folder: Path, count: int) -> int:
    """The most memory Python held converting `count` rows (tracemalloc's peak)."""
    source = _jsonl(folder / f"rows{count}.jsonl", _problems(count))
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    convert_files("math", [source], folder / f"out{count}", "train")
    return tracemalloc.get_traced_memory()[1] - before


def test_memory_converting_does_not_grow_with_the_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(math_datasets, "BATCH_ROWS", 150)
    convert_files("math", [_jsonl(tmp_path / "warm.jsonl", _problems(10))], tmp_path / "warm")
    tracemalloc.start()
    try:
        small = _peak_converting(tmp_path, 600)
        large = _peak_converting(tmp_path, 2_400)
    finally:
        tracemalloc.stop()
    # held whole, 4 times the rows took about 4 times the memory
    assert large < 1.5 * small, (small, large)
    assert len(read_rows(str(tmp_path / "out2400" / "rl" / "train.parquet"))) == 2_400


def test_tables_written_batch_by_batch_hold_every_row_once_in_order(tmp_path, monkeypatch):
    monkeypatch.setattr(math_datasets, "BATCH_ROWS", 4)
    rows = _problems(19)
    shards = [
        _jsonl(tmp_path / "train-00000-of-00002.jsonl", rows[:10]),
        str(write_parquet(rows[10:], tmp_path / "train-00001-of-00002.parquet")),
    ]
    written = convert_files("math", shards, tmp_path / "out")
    sft, rl = math_rows(rows, "train")  # every row at once, its indices 0..18
    assert read_rows(str(written["sft/train"])) == sft
    assert read_rows(str(written["rl/train"])) == rl
    assert (
        pq.ParquetFile(written["rl/train"]).metadata.num_row_groups == 5
    )  # 4+4+4+4+3, across the shards


def test_a_batch_of_long_rows_ends_at_its_text_size(tmp_path, monkeypatch):
    monkeypatch.setattr(math_datasets, "BATCH_TEXT_CHARS", 1_000)
    rows = [{"problem": "p" * 600, "solution": "\\boxed{1}"} for _ in range(5)]
    written = convert_files("math", [_jsonl(tmp_path / "train.jsonl", rows)], tmp_path / "out")
    assert pq.ParquetFile(written["sft/train"]).metadata.num_row_groups == 3  # 2+2+1
    assert read_rows(str(written["sft/train"])) == math_rows(rows, "train")[0]


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_a_bad_row_past_the_first_batches_is_named_and_leaves_nothing(
    tmp_path, monkeypatch, suffix
):
    monkeypatch.setattr(math_datasets, "BATCH_ROWS", 3)
    rows: list[dict[str, str]] = _problems(12)
    rows[9] = {"problem": "p", "solution": "no answer here"}
    if suffix == ".jsonl":
        source = tmp_path / "train.jsonl"
        _jsonl(source, rows[:5])
        with source.open("a") as lines:  # a blank line: row 10 is on line 11
            lines.write("\n" + "".join(json.dumps(row) + "\n" for row in rows[5:]))
        where = f"{source}:11"
    else:
        source = write_parquet(rows, tmp_path / "train.parquet")
        where = f"{source} row 10"
    out = tmp_path / "out"
    with pytest.raises(DataFileError) as refused:
        convert_files("math", [str(source)], out)
    assert str(refused.value).startswith(f"{where}: ")
    assert "\\boxed" in str(refused.value)
    assert [name for _, _, names in os.walk(out) for name in names] == []


def test_a_file_that_is_not_read_to_its_end_is_named_before_its_bad_rows(tmp_path, monkeypatch):
    """Broken JSON further on is said first, as when the file was read whole before its rows
    were converted: the file, not its row, is what to fix first."""
    monkeypatch.setattr(math_datasets, "BATCH_ROWS", 3)
    rows: list[dict[str, str]] = _problems(8)
    rows[1] = {"question": "a GSM8K row", "answer": "#### 1"}
    source = tmp_path / "train.jsonl"
    _jsonl(source, rows)
    with source.open("a") as lines:
        lines.write('{"problem": \n')
    with pytest.raises(DataFileError, match=f"^{source}:9: not valid JSON"):
        convert_files("math", [str(source)], tmp_path / "out")


def test_tables_of_generated_rows_are_written_a_batch_at_a_time(tmp_path, monkeypatch):
    """`mfsdp data synthetic` writes its problems through `write_tables`: rows it generates
    are written a batch at a time, never made one list."""
    monkeypatch.setattr(files, "BATCH_ROWS", 4)
    rows = [{"a": i, "text": f"{i} + {i}"} for i in range(10)]
    out, empty = tmp_path / "t.parquet", tmp_path / "empty.parquet"
    files.write_tables({out: (dict(row) for row in rows), empty: iter([])})
    assert pq.ParquetFile(out).metadata.num_row_groups == 3  # 4+4+2
    assert read_rows(str(out)) == rows
    assert pq.read_table(empty).num_rows == 0
