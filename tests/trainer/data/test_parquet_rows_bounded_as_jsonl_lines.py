"""A parquet row is bounded as a jsonl line is (MAX_JSONL_LINE_BYTES), and running out of
memory reading a data file is named as such. A 2.6 MB zstd parquet file holding one 450 MiB
cell was within the decoding budget of its size and took 5.2 GB to convert (a jsonl line
that long is refused); under a memory limit pyarrow's ArrowMemoryError was reported as
"not a readable parquet file" (exit 2), blaming a file that is fine.

Every reader of data files (`mfsdp data gsm8k|math`, the sft and grpo loaders) reads them
through `read_rows_with_origins`, tested here."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.data.files import MAX_JSONL_LINE_BYTES, DataFileError, read_rows_with_origins

REPO = Path(__file__).resolve().parents[3]
LONG = "q" * (MAX_JSONL_LINE_BYTES + 1)


def write_parquet(path: Path, questions: list[str]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    answers = ["#### 1"] * len(questions)
    pq.write_table(pa.table({"question": questions, "answer": answers}), path, compression="zstd")
    return path


def run_python(code: str, *args: object) -> list[str]:
    """`code` run by a fresh interpreter in the repository: its stdout's lines."""
    done = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.splitlines()


# Reads the file and prints the error's exit code and message, then the most memory
# pyarrow held at once (its default pool's peak) in that process.
READ_AND_MEASURE = """
import sys
import pyarrow as pa
from trainer.data.files import DataFileError, read_rows_with_origins
try:
    read_rows_with_origins(sys.argv[1])
    print("read")
except DataFileError as err:
    print(err.exit_code, err)
print(pa.default_memory_pool().max_memory())
"""


def test_one_cell_past_the_cap_is_refused_before_its_page_is_decoded(tmp_path):
    table = write_parquet(tmp_path / "train.parquet", [LONG])
    assert table.stat().st_size < 64 << 10  # within the decoding budget of its size's floor
    said, peak = run_python(READ_AND_MEASURE, table)
    assert said == (
        f"2 {table} row 1: more than {MAX_JSONL_LINE_BYTES} bytes decoded; no row of a"
        " table is that long"
    )
    assert int(peak) < 8 << 20, peak  # the cell's page was never decompressed


def test_a_long_row_among_short_ones_is_named_by_its_place(tmp_path):
    """Twenty rows of incompressible text make the file large enough that its decoding
    budget holds the long row, and the row group's average row is far under the cap: the
    row is found in the decoded batch, before any row is made a Python object."""
    short = [base64.b64encode(os.urandom(30_000)).decode() for _ in range(20)]
    table = write_parquet(tmp_path / "train.parquet", [*short[:5], LONG, *short[5:]])
    assert table.stat().st_size * 256 > 2 * MAX_JSONL_LINE_BYTES
    with pytest.raises(DataFileError) as refused:
        read_rows_with_origins([str(table)])
    assert str(refused.value) == (
        f"{table} row 6: more than {MAX_JSONL_LINE_BYTES} bytes decoded; no row of a table"
        " is that long"
    )
    assert refused.value.exit_code == 2


def test_rows_within_the_cap_are_read_whole(tmp_path):
    rows = ["a" * (1 << 20), "b" * 10]
    table = write_parquet(tmp_path / "train.parquet", rows)
    read, _origins = read_rows_with_origins([str(table)])
    assert [row["question"] for row in read] == rows


# Reads the file with the address space limited to what the process has mapped plus 64
# MiB, too little to decode a 60 MiB cell, and prints the error's type, exit code, message.
# pyarrow is loaded first: the limit is to fail the read, not the loading of a library.
READ_LIMITED = """
import re, resource, sys
import pyarrow.compute, pyarrow.parquet
from trainer.data.files import read_rows_with_origins
from mfsdp_ckpt.errors import MfsdpError
mapped = int(re.search(r"VmSize:\\s+(\\d+)", open("/proc/self/status").read())[1]) << 10
resource.setrlimit(resource.RLIMIT_AS, (mapped + (64 << 20),) * 2)
try:
    read_rows_with_origins(sys.argv[1])
    print("read")
except MfsdpError as err:
    print(type(err).__name__, err.exit_code, err)
"""


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_running_out_of_memory_reading_a_table_is_named_as_such(tmp_path, suffix):
    cell = "q" * (60 << 20)  # within the cap and the floor of the decoding budget
    table = tmp_path / f"train{suffix}"
    if suffix == ".parquet":
        write_parquet(table, [cell])
    else:
        table.write_text(json.dumps({"question": cell, "answer": "#### 1"}) + "\n")
    (said,) = run_python(READ_LIMITED, table)
    assert said == (
        f"DataMemoryError 1 {table}: out of memory reading it; free memory or raise the"
        " process's limit (ulimit -v)"
    )
