"""A parquet column whose values Python cannot hold (a nanosecond timestamp that is not a
whole microsecond: pandas' `to_parquet` default) made the whole file "not a readable parquet
file (... Install pandas ...)", even a column no trainer reads. Only the columns read are
decoded: SFT never reads such a column it does not use, so it says nothing of it; a column
read (or any, for a reader that names none) is refused naming the column and its type, with
no advice to install pandas."""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trainer.config import DataConfig
from trainer.data.files import DataFileError, read_rows_with_origins
from trainer.data.sft_dataset import load_sft_splits
from trainer.tiny import build_tokenizer

CHAT = [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"}]
NANOSECONDS = 1_700_000_000_123_456_789  # not a whole microsecond


def _table(path: Path, **columns: pa.Array) -> Path:
    pq.write_table(pa.table({"messages": pa.array([CHAT] * 4), **columns}), path)
    return path


def _stamps() -> pa.Array:
    return pa.array([NANOSECONDS] * 4, type=pa.timestamp("ns"))


def test_sft_reads_a_file_with_a_nanosecond_column_it_does_not_read(tmp_path, caplog):
    table = _table(tmp_path / "t.parquet", created_at=_stamps())
    cfg = DataConfig(train_files=[str(table)], val_ratio=0.0)
    with caplog.at_level(logging.WARNING, logger="mfsdp.data"):
        train, _ = load_sft_splits(cfg, build_tokenizer(), seed=0, progress=False)
    assert len(train) == 4
    assert "created_at" not in caplog.text


def test_rows_hold_the_columns_read_as_pyarrow_reads_them(tmp_path):
    table = _table(tmp_path / "t.parquet", created_at=_stamps(), id=pa.array([1, 2, 3, 4]))
    rows, _ = read_rows_with_origins([str(table)], ("messages", "id"))
    assert rows == [{"messages": CHAT, "id": i} for i in (1, 2, 3, 4)]


@pytest.mark.parametrize("read", [None, ("messages", "created_at")])
def test_a_column_read_is_refused_naming_it_not_pandas(tmp_path, read):
    table = _table(tmp_path / "t.parquet", created_at=_stamps())
    with pytest.raises(DataFileError) as refused:
        read_rows_with_origins([str(table)], read)
    said = str(refused.value)
    assert said.startswith(
        f"{table}: column 'created_at' (timestamp[ns]) holds values Python cannot hold"
    ), said
    assert "pandas" not in said and "not a readable parquet file" not in said


def test_a_nanosecond_field_inside_the_chat_names_the_messages_column(tmp_path):
    turn = pa.struct({"role": pa.string(), "content": pa.string(), "when": pa.timestamp("ns")})
    turns = pa.array([[{"role": "user", "content": "hi", "when": NANOSECONDS}]] * 2, pa.list_(turn))
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"messages": turns}), path)
    cfg = DataConfig(train_files=[str(path)], val_ratio=0.0)
    with pytest.raises(DataFileError, match=r"t\.parquet: column 'messages' \(list<"):
        load_sft_splits(cfg, build_tokenizer(), seed=0, progress=False)
