"""A jsonl row is named by its 1-based line, whatever is wrong with it, and a data file with
no rows is named as such.

Was: a JSON error on a file's 25th line said `file.jsonl:25`, a content error on that same
line `file.jsonl row 24` (its 0-based row, blank lines not counted); an empty train.jsonl
said `data.global_batch_size=8 exceeds the 0 training rows`, naming no file."""

from __future__ import annotations

import json

import pytest

from tests.support.data_tables import write_parquet
from trainer.data.files import EmptyTableError, read_rows_with_origins
from trainer.data.math_datasets import convert_files

GOOD = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}


def test_a_rows_line_names_it_blank_lines_counted(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(GOOD) + "\n\n" + json.dumps(GOOD) + "\n   \n" + json.dumps(GOOD))
    rows, origins = read_rows_with_origins([str(path)])
    assert len(rows) == 3
    assert [origins(i) for i in range(3)] == [f"{path}:1", f"{path}:3", f"{path}:5"]


def test_a_content_error_and_a_syntax_error_name_the_same_line(tmp_path):
    from trainer.config import DataConfig
    from trainer.data.chat import ChatFormatError
    from trainer.data.sft_dataset import load_sft_splits
    from trainer.tiny import build_tokenizer

    path = tmp_path / "nc.jsonl"
    bad = {"messages": [{"role": "user", "content": None}, {"role": "assistant", "content": 5}]}
    path.write_text((json.dumps(GOOD) + "\n") * 24 + json.dumps(bad) + "\n")
    with pytest.raises(ChatFormatError, match=f"^{path}:25: "):
        load_sft_splits(DataConfig(train_files=[str(path)]), build_tokenizer(), 0, False)


def test_parquet_rows_are_named_from_1(tmp_path):
    path = write_parquet([GOOD, GOOD], tmp_path / "t.parquet")
    assert read_rows_with_origins([str(path)])[1](1) == f"{path} row 2"


@pytest.mark.parametrize("text", ["", "\n\n  \n"])
def test_a_file_with_no_rows_is_named(tmp_path, text):
    empty = tmp_path / "train.jsonl"
    empty.write_text(text)
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps(GOOD) + "\n")
    with pytest.raises(EmptyTableError, match=f"^{empty}: holds no rows"):
        read_rows_with_origins([str(good), str(empty)])


def test_gsm8k_names_a_bad_row_by_its_line(tmp_path):
    source = tmp_path / "train.jsonl"
    row = {"question": "q", "answer": "a #### 5"}
    source.write_text(json.dumps(row) + "\n\n" + json.dumps({"question": "q", "answer": "x"}))
    with pytest.raises(ValueError, match=f"^{source}:3: answer has no"):
        convert_files("gsm8k", [str(source)], tmp_path / "out")
