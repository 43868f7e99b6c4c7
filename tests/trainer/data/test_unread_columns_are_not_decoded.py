"""Rows are read through the columns the run reads, and hold no other.

A column no run reads (a verl multimodal table's images, raw pages) was decoded into every
row and held for the whole run: a 600 MB `images` column added 2.1 GB to the GRPO prompt
load (`python bench/data_unread_columns.py`, docs/grpo.md). It was counted against the
decoding budget too, so a valid 130 KB table was refused as "a compression bomb?" for a
column never read. A parquet file's other columns are now never decoded, a JSON row's other
keys dropped as it is parsed; errors about a missing column still name the row's columns.
"""

from __future__ import annotations

import base64
import json
import os
import tracemalloc
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trainer.data import files
from trainer.data.files import DataFileError, read_rows_with_origins
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import RLDataError, load_rl_prompts
from trainer.tiny import build_tokenizer

CHAT = [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"}]
ROWS = 200
BLOB = 20_000  # bytes of the unread column a row: 4 MB in all
READ = ("messages",)


def _blob() -> bytes:
    return os.urandom(BLOB)


def _parquet(path: Path, blob: bool) -> Path:
    columns = {"messages": [CHAT] * ROWS}
    if blob:
        columns["images"] = pa.array([[{"bytes": _blob()}] for _ in range(ROWS)])
    pq.write_table(pa.table(columns), path)
    return path


def _jsonl(path: Path, blob: bool) -> Path:
    with open(path, "w") as out:
        for _ in range(ROWS):
            row = {"messages": CHAT}
            if blob:
                row["image"] = base64.b64encode(_blob()).decode()
            out.write(json.dumps(row) + "\n")
    return path


def _peak_bytes(path: Path) -> tuple[list[dict], int]:
    """The rows read through READ, and the most Python memory reading them held."""
    tracemalloc.start()
    try:
        rows, _ = read_rows_with_origins([str(path)], READ)
        return rows, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("write", [_parquet, _jsonl], ids=["parquet", "jsonl"])
def test_an_unread_column_takes_no_memory(tmp_path, write):
    suffix = ".parquet" if write is _parquet else ".jsonl"
    plain_rows, plain = _peak_bytes(write(tmp_path / f"plain{suffix}", blob=False))
    rows, with_blob = _peak_bytes(write(tmp_path / f"blob{suffix}", blob=True))
    # held, the column took ROWS * BLOB (4 MB) more; one JSON line at a time is BLOB * 4 / 3
    assert with_blob - plain < ROWS * BLOB / 8, (with_blob, plain)
    assert rows == plain_rows == [{"messages": CHAT}] * ROWS


def test_an_unread_column_is_not_charged_to_the_decoding_budget(tmp_path, monkeypatch):
    """A column of long text, each value compressed to a few bytes: a compression bomb when
    read (9 MB from a file of a few KB, past the budget of 256 bytes decoded per byte of
    file, its floor lowered to 1 MiB), nothing when it is not."""
    monkeypatch.setattr(files, "DECODED_FLOOR", 1 << 20)
    path = tmp_path / "notes.parquet"
    notes = ["a" * 30_000 + str(index) for index in range(300)]
    pq.write_table(pa.table({"messages": [CHAT] * 300, "notes": notes}), path, compression="zstd")
    with pytest.raises(DataFileError, match=r"notes\.parquet: decodes to more than 1048576 bytes"):
        read_rows_with_origins([str(path)], ("messages", "notes"))
    rows, _ = read_rows_with_origins([str(path)], READ)
    assert rows == [{"messages": CHAT}] * 300


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl", ".json"])
def test_a_row_without_the_prompt_is_named_with_every_column_it_has(tmp_path, suffix):
    """GRPO reads `prompt`, `reward_model`, `data_source` and `extra_info`; its error about a
    row with no prompt lists the columns the row has in its file, read again for the error,
    and what reads such a table."""
    rows = [
        {"prompt": "2+2?", "reward_model": {"ground_truth": "4"}, "data_source": "openai/gsm8k"}
    ]
    rows.append({"messages": CHAT, "tag": "kept"})
    path = tmp_path / f"t{suffix}"
    if suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows[1:]), path)
        where = f"{path} row 1"
    elif suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n\n" for row in rows))  # blank lines
        where = f"{path}:3"
    else:
        path.write_text(json.dumps(rows))
        where = f"{path} row 2"
    with pytest.raises(RLDataError) as refused:
        load_rl_prompts([str(path)], RLDataConfig(), build_tokenizer())
    assert str(refused.value) == (
        f"{where}: no 'prompt' column (found ['messages', 'tag']); an SFT table (chat"
        " `messages`): `mfsdp train sft` reads it"
    )


def test_a_row_of_a_file_too_big_read_whole_is_named_with_its_schema_columns(tmp_path, monkeypatch):
    """Read again whole for the error, the file is past its budget (an unread column of
    long text): the error names every column of the file's schema, not the budget."""
    monkeypatch.setattr(files, "DECODED_FLOOR", 1 << 20)
    path = tmp_path / "notes.parquet"
    notes = ["a" * 30_000 + str(index) for index in range(300)]
    extra = [{"index": index} for index in range(300)]
    pq.write_table(pa.table({"extra_info": extra, "notes": notes}), path, compression="zstd")
    with pytest.raises(RLDataError) as refused:
        load_rl_prompts([str(path)], RLDataConfig(), build_tokenizer())
    assert str(refused.value) == (
        f"{path} row 1: no 'prompt' column (found ['extra_info', 'notes'])"
    )
