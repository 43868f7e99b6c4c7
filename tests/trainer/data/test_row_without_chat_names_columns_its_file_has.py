"""A row with none of the columns a run reads is named with the columns its file has, even
where the row cannot be read again whole.

Rows are read through the columns the run reads; the error about a row that has none of
them reads the row again whole, to name what it holds. A parquet file whose only big
column is one the run does not read (a compression bomb there) is refused read whole, and
the error said "found: none" of a file with two columns; a JSON row holding a lone
surrogate in a key the run does not read was read, then refused read again, and said the
same. The parquet file's columns now come from its schema (no row decoded), a JSON row read
again is checked through the columns the run reads, as it was read.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trainer.config import SFTConfig, load_config
from trainer.data import files
from trainer.data.chat import ChatFormatError
from trainer.data.sft_dataset import load_sft_splits
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import RLDataError, load_rl_prompts
from trainer.tiny import build_tokenizer

ROWS = 300


def _bomb(tmp_path, monkeypatch):
    """A parquet file past its decoding budget (floor lowered to 1 MiB) in `notes` alone."""
    monkeypatch.setattr(files, "DECODED_FLOOR", 1 << 20)
    path = tmp_path / "bomb.parquet"
    notes = ["a" * 30_000 + str(index) for index in range(ROWS)]
    table = pa.table({"question": ["1+1?"] * ROWS, "notes": notes})
    pq.write_table(table, path, compression="zstd")
    with pytest.raises(files.DataFileError, match="compression bomb"):
        files.read_rows_with_origins([str(path)])  # read whole, it is refused
    return path


def _sft_refusal(path) -> str:
    cfg = load_config(SFTConfig, None, [f"data.train_files=[{path}]"])
    with pytest.raises(ChatFormatError) as refused:
        load_sft_splits(cfg.data, build_tokenizer(), 0, False)
    return str(refused.value)


def test_sft_names_the_schema_columns_of_a_file_refused_read_whole(tmp_path, monkeypatch):
    path = _bomb(tmp_path, monkeypatch)
    said = _sft_refusal(path)
    assert said.startswith(
        f"{path} row 1: no 'messages' column and no 'prompt'/'response' columns"
        " (found: question, notes)"
    ), said


def test_grpo_names_the_schema_columns_of_a_file_refused_read_whole(tmp_path, monkeypatch):
    path = _bomb(tmp_path, monkeypatch)
    with pytest.raises(RLDataError) as refused:
        load_rl_prompts([str(path)], RLDataConfig(), build_tokenizer())
    assert str(refused.value).startswith(
        f"{path} row 1: no 'prompt' column (found ['notes', 'question'])"
    ), str(refused.value)


@pytest.mark.parametrize(
    "suffix, text, where",
    [
        (".jsonl", '{"question": "1+1?", "notes": "a\\ud800b"}\n', ":1"),
        (".json", '[{"question": "1+1?", "notes": "a\\ud800b"}]', " row 1"),
    ],
)
def test_a_json_row_with_a_lone_surrogate_in_an_unread_key_is_named_by_its_keys(
    tmp_path, suffix, text, where
):
    path = tmp_path / f"t{suffix}"
    path.write_text(text)
    said = _sft_refusal(path)
    assert said.startswith(
        f"{path}{where}: no 'messages' column and no 'prompt'/'response' columns"
        " (found: question, notes)"
    ), said


def test_a_lone_surrogate_in_a_column_read_is_still_refused(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"prompt": "1+1?", "response": "a\\ud800b"}\n')
    cfg = load_config(SFTConfig, None, [f"data.train_files=[{path}]"])
    with pytest.raises(files.DataFileError, match=rf"{path}:1: response holds '\\ud800'"):
        load_sft_splits(cfg.data, build_tokenizer(), 0, False)
