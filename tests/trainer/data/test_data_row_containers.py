"""A row of a data file may hold MAX_ROW_CONTAINERS JSON objects and arrays, and a parquet
file is charged the Python object each nested value becomes.

Was: a 30 MB jsonl line of 10M empty arrays was converted at 830 MB peak (27x its size),
and a 669-byte parquet file of 7M empty lists in one cell took 535 MB: each was charged only
its 8-byte offset, within the 64 MB floor."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.cli_errors import one_error
from tests.support.data_tables import read_rows
from tests.support.interop_layouts import run_cli
from trainer.data import files
from trainer.data.files import MAX_ROW_CONTAINERS, DataFileError

ROW = {"question": "1 + 2?", "answer": "#### 3"}


def _crowded_row(arrays: int) -> str:
    return json.dumps(ROW)[:-1] + ', "x": [' + ",".join(["[]"] * arrays) + "]}"


def test_a_jsonl_row_of_too_many_arrays_is_refused_naming_its_line(tmp_path):
    source = tmp_path / "b.jsonl"
    source.write_text(json.dumps(ROW) + "\n" + _crowded_row(MAX_ROW_CONTAINERS) + "\n")
    code, stdout, stderr = run_cli("data", "gsm8k", "--input", source, "--out", tmp_path / "dd")
    assert code == 2, stdout + stderr
    one_error(stderr, f"{source}:2: {MAX_ROW_CONTAINERS + 2} '{{' and '['", "a row may hold")
    assert not (tmp_path / "dd").exists()


def test_a_row_within_the_cap_is_read(tmp_path):
    source = tmp_path / "b.jsonl"
    source.write_text(_crowded_row(MAX_ROW_CONTAINERS - 2) + "\n")
    (row,) = read_rows(source)
    assert len(row["x"]) == MAX_ROW_CONTAINERS - 2


def test_a_json_array_of_too_many_is_refused_naming_jsonl(tmp_path):
    source = tmp_path / "b.json"
    source.write_text("[" + _crowded_row(MAX_ROW_CONTAINERS) + "]")
    with pytest.raises(DataFileError, match=r"b\.json: .*one \.json document may hold.*\.jsonl"):
        read_rows(source)


def test_a_json_of_rows_one_per_line_is_bounded_per_row(tmp_path, monkeypatch):
    """datasets' `to_json` writes rows one per line under the name .json: the cap is each
    row's, not the file's (a line too crowded is named as in a .jsonl)."""
    monkeypatch.setattr(files, "MAX_ROW_CONTAINERS", 4)
    source = tmp_path / "b.json"
    source.write_text("".join(json.dumps({**ROW, "tags": [[i]]}) + "\n" for i in range(3)))
    assert len(read_rows(source)) == 3
    source.write_text(source.read_text() + _crowded_row(4) + "\n")
    with pytest.raises(DataFileError, match=r"b\.json:4: 6 '\{' and '\['"):
        read_rows(source)


def _one_cell(values: pa.Array) -> pa.Table:
    """One row whose one cell is a list of `values`."""
    offsets = pa.array([0, len(values)], pa.int32())
    return pa.table({"messages": pa.ListArray.from_arrays(offsets, values)})


@pytest.mark.parametrize("nested", ["empty-lists", "structs"])
def test_a_parquet_cell_of_millions_of_nested_values_is_refused(tmp_path, nested):
    count = 2_000_000
    if nested == "empty-lists":
        values = pa.ListArray.from_arrays(
            pa.array([0] * (count + 1), pa.int32()), pa.array([], pa.int64())
        )
    else:
        values = pa.StructArray.from_arrays([pa.nulls(count, pa.int64())], names=["role"])
    bomb = tmp_path / "train.parquet"
    pq.write_table(_one_cell(values), bomb)
    assert bomb.stat().st_size < 4096
    with pytest.raises(DataFileError, match="decodes to more than"):
        read_rows(bomb)


def test_chat_rows_in_parquet_are_read(tmp_path):
    turns = [{"role": "user", "content": "1 + 2?"}, {"role": "assistant", "content": "3"}]
    table = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist([{"messages": turns}] * 20_000), table)
    rows = read_rows(table)
    assert len(rows) == 20_000 and rows[-1] == {"messages": turns}
