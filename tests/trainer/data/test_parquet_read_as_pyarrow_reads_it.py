"""A parquet data file is read as pyarrow (and so verl's `pd.read_parquet`) reads it: the
same rows, whatever its row groups or the columns no trainer reads.

* A file of more than one row group with a nested text column (chat turns, a struct) was
  "not a readable parquet file (Nested data conversions not implemented for chunked array
  outputs)": verl's gsm8k file as `datasets` writes it (1000 rows a group), a table of more
  than pyarrow's 1 Mi rows a group, 2 groups of 1 row each.
* A map column anywhere (a `meta` map no trainer reads) was "not a readable parquet file
  (Function 'list_flatten' has no kernel ...)"; a map is measured against the decoding
  budget as any nested column is.
* One row group of many batches took far more memory than pyarrow reading its rows in
  batches, and time growing with the group's square: read as dictionaries batch by batch,
  each batch held a new copy of every distinct text of the group read so far.
* A 0-byte .parquet was "not a readable parquet file" (exit 2) where an empty .jsonl and a
  parquet file of no rows "hold no rows" (exit 1).
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.data_tables import read_rows
from trainer.data.files import (
    MAX_ROW_BYTES,
    DataFileError,
    EmptyTableError,
    read_rows_with_origins,
)
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import load_rl_prompts
from trainer.tiny import build_tokenizer


def sft_messages(index: int) -> dict[str, Any]:
    return {
        "messages": [
            {"role": "user", "content": f"What is {index}+1?"},
            {"role": "assistant", "content": f"It is {index + 1}."},
        ]
    }


def sft_extra_info(index: int) -> dict[str, Any]:
    """verl's SFT layout read through `prompt_dict_keys`: text in a struct column."""
    return {"extra_info": {"question": f"What is {index}+1?", "answer": f"#### {index + 1}"}}


def verl_rl(index: int) -> dict[str, Any]:
    """A row as verl's examples/data_preprocess/gsm8k.py writes it."""
    return {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": f"What is {index}+1? Let's think step by step."}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(index + 1)},
        "extra_info": {"split": "train", "index": index, "answer": f"#### {index + 1}"},
    }


def write_groups(path: Path, rows: list[dict[str, Any]], group_rows: int) -> Path:
    """One row group per `group_rows` rows, as `datasets`' `to_parquet` writes them (one
    `write_table` per writer batch)."""
    table = pa.Table.from_pylist(rows)
    with pq.ParquetWriter(path, table.schema) as writer:
        for start in range(0, len(rows), group_rows):
            writer.write_table(table.slice(start, group_rows))
    assert pq.ParquetFile(path).num_row_groups == -(-len(rows) // group_rows)
    return path


@pytest.mark.parametrize("layout", [sft_messages, sft_extra_info, verl_rl])
@pytest.mark.parametrize(
    ("rows", "group_rows"),
    [
        (2, 1),  # the least: two groups of one row
        (1500, 1000),  # `datasets`' writer batch
        (40_000, 30_000),  # groups of more rows than one batch, batches crossing them
    ],
)
def test_rows_of_every_row_group_layout_are_those_pyarrow_reads(tmp_path, layout, rows, group_rows):
    table = write_groups(tmp_path / "train.parquet", [layout(i) for i in range(rows)], group_rows)
    assert read_rows(table) == pq.read_table(table).to_pylist()


def test_ten_thousand_groups_of_one_row_are_read(tmp_path):
    table = write_groups(tmp_path / "train.parquet", [sft_messages(i) for i in range(10_000)], 1)
    assert read_rows(table) == pq.read_table(table).to_pylist()


def test_verls_gsm8k_file_in_row_groups_gives_every_prompt(tmp_path):
    table = write_groups(tmp_path / "train.parquet", [verl_rl(i) for i in range(2500)], 1000)
    prompts, dropped = load_rl_prompts([str(table)], RLDataConfig(), build_tokenizer())
    assert dropped == 0 and len(prompts) == 2500


def test_a_long_row_in_a_group_of_many_batches_is_named_by_its_place_in_the_file(tmp_path):
    """A group of more rows than one batch is measured whole before its rows are made:
    the long row is still named by its row in the file, past the groups before it.
    Incompressible rows make the file's decoding budget hold the long row."""
    short = [base64.b64encode(os.urandom(24)).decode() for _ in range(30_000)]
    long = "q" * (MAX_ROW_BYTES + 1)
    questions = [*short[:5], *short[5:20_005], long, *short[20_005:]]
    table = pa.table({"question": questions})
    path = tmp_path / "train.parquet"
    with pq.ParquetWriter(path, table.schema, compression="zstd") as writer:
        writer.write_table(table.slice(0, 5))
        writer.write_table(table.slice(5))
    assert path.stat().st_size * 256 > 2 * MAX_ROW_BYTES
    with pytest.raises(DataFileError) as refused:
        read_rows_with_origins(str(path))
    assert str(refused.value) == (
        f"{path} row 20006: more than {MAX_ROW_BYTES} bytes decoded; no row of a table is that long"
    )


# Reads the file in a fresh interpreter, by the reader given, and prints how much its peak
# resident memory grew past what it held before reading.
READ_AND_MEASURE = """
import re, resource, sys
import pyarrow.parquet as pq
from trainer.data.files import read_rows_with_origins
readers = {
    "rows": lambda path: read_rows_with_origins(path)[0],
    "pyarrow": lambda path: [
        row for batch in pq.ParquetFile(path).iter_batches(16384) for row in batch.to_pylist()
    ],
}
held = int(re.search(r"VmRSS:\\s+(\\d+)", open("/proc/self/status").read())[1])
rows = readers[sys.argv[2]](sys.argv[1])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - held)
"""


def memory_reading(path: Path, reader: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", READ_AND_MEASURE, str(path), reader],
        cwd=Path(__file__).resolve().parents[3],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stdout)


def test_one_large_row_group_takes_about_the_memory_of_pyarrow_reading_it(tmp_path):
    """100,000 rows of 72 MB of distinct text in one group (as `pq.write_table` writes up to
    1 Mi rows). The group is measured, and its dictionaries let go, before its rows are made,
    from pyarrow's batches of plain text; the rows were made while the dictionaries (every
    distinct text, and a copy of them) were held."""
    para = "The quick brown fox jumps over the lazy dog. " * 8
    rows = [
        {"messages": [{"role": "user", "content": f"Q{i} {para}"},
                      {"role": "assistant", "content": f"A{i} {para}"}]}
        for i in range(100_000)
    ]  # fmt: skip
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    assert pq.ParquetFile(path).num_row_groups == 1
    rows_memory, pyarrow_memory = memory_reading(path, "rows"), memory_reading(path, "pyarrow")
    assert rows_memory < 1.3 * pyarrow_memory, (rows_memory, pyarrow_memory)


def with_maps(rows: int) -> pa.Table:
    """Chat rows beside map columns no trainer reads: top level, of numbers, nested in a
    struct and in a list."""
    turns = [sft_messages(i)["messages"] for i in range(rows)]
    meta = pa.array([[("src", f"s{i}"), ("lang", "en")] for i in range(rows)],
                    pa.map_(pa.string(), pa.string()))  # fmt: skip
    counts = pa.array([[(i, i * 2)] if i % 3 else None for i in range(rows)],
                      pa.map_(pa.int64(), pa.int64()))  # fmt: skip
    return pa.table({
        "messages": pa.array(turns),
        "meta": meta,
        "counts": counts,
        "info": pa.StructArray.from_arrays([meta], names=["tags"]),
        "history": pa.array([[[("k", "v")]]] * rows, pa.list_(pa.map_(pa.string(), pa.string()))),
    })  # fmt: skip


@pytest.mark.parametrize("group_rows", [None, 1])
def test_map_columns_are_read_as_pyarrow_reads_them(tmp_path, group_rows):
    path = tmp_path / "train.parquet"
    table = with_maps(5)
    if group_rows is None:
        pq.write_table(table, path)
    else:
        write_groups(path, table.to_pylist(), group_rows)
    assert read_rows(path) == pq.read_table(path).to_pylist()


def test_a_map_repeating_one_long_value_is_counted_each_time(tmp_path):
    """A map's values are measured as any nested text is: 2,000 uses of one 8 MiB value
    stored once decode to 16 GiB, refused before the value is copied."""
    value = pa.DictionaryArray.from_arrays(
        pa.array([0] * 2000, pa.int32()), pa.array(["y" * (8 << 20)])
    )
    keys = pa.array(["k"] * 2000)
    offsets = pa.array(range(2001), pa.int32())
    bomb = tmp_path / "train.parquet"
    pq.write_table(pa.table({"meta": pa.MapArray.from_arrays(offsets, keys, value)}), bomb,
                   compression="zstd", store_schema=False)  # fmt: skip
    assert bomb.stat().st_size < 64 << 10
    with pytest.raises(DataFileError) as refused:
        read_rows_with_origins(str(bomb))
    assert "decodes to more than" in str(refused.value) and refused.value.exit_code == 2


def test_a_fixed_size_list_repeating_one_long_value_is_counted_each_time(tmp_path):
    """A fixed-size list (kept by the Arrow schema stored in the file) was charged its
    array's bytes, the value once: one row of 200 uses of 1 MiB read within the floor."""
    value = pa.DictionaryArray.from_arrays(
        pa.array([0] * 200, pa.int32()), pa.array(["y" * (1 << 20)])
    )
    bomb = tmp_path / "train.parquet"
    pq.write_table(pa.table({"tags": pa.FixedSizeListArray.from_arrays(value, 200)}), bomb,
                   compression="zstd")  # fmt: skip
    assert pa.types.is_fixed_size_list(pq.read_schema(bomb).field("tags").type)
    with pytest.raises(DataFileError) as refused:
        read_rows_with_origins(str(bomb))
    assert "decodes to more than" in str(refused.value) and refused.value.exit_code == 2


def test_an_empty_parquet_file_holds_no_rows_as_an_empty_jsonl_does(tmp_path):
    for name in ("train.parquet", "train.jsonl"):
        (tmp_path / name).touch()
        with pytest.raises(EmptyTableError) as refused:
            read_rows_with_origins(str(tmp_path / name))
        assert str(refused.value).startswith(f"{tmp_path / name}: holds no rows")
        assert refused.value.exit_code == 1


def test_a_file_of_bytes_that_are_no_parquet_is_still_refused_as_such(tmp_path):
    path = tmp_path / "train.parquet"
    path.write_bytes(b"PAR1 not really")
    with pytest.raises(DataFileError) as refused:
        read_rows_with_origins(str(path))
    assert str(refused.value).startswith(f"{path}: not a readable parquet file (")
    assert refused.value.exit_code == 2
