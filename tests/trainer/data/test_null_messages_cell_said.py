"""A row whose `messages` cell is null is said to be that. Was: "no 'messages' column and no
'prompt'/'response' columns (found: messages)", which named the column it said was missing.
A null `messages` beside prompt and response columns still reads those (a table mixing
both forms)."""

from __future__ import annotations

import json

import pytest

from tests.support.data_tables import write_parquet
from trainer.config import DataConfig
from trainer.data.chat import ChatColumns, ChatFormatError, messages_of
from trainer.data.sft_dataset import load_sft_splits
from trainer.tiny import build_tokenizer

TURNS = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]


def _write(rows, path):
    if path.suffix == ".parquet":
        return write_parquet(rows, path)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.mark.parametrize(("name", "row"), [("t.parquet", "{path} row 2"), ("t.jsonl", "{path}:2")])
def test_a_null_messages_cell_is_named_null(tmp_path, name, row):
    path = _write([{"messages": TURNS}, {"messages": None}], tmp_path / name)
    cfg = DataConfig(train_files=[str(path)])
    with pytest.raises(ChatFormatError) as raised:
        load_sft_splits(cfg, build_tokenizer(), seed=0, progress=False)
    assert str(raised.value) == (
        row.format(path=path) + ": the 'messages' cell is null (empty): no chat turns to train on"
    )


def test_the_messages_key_set_is_the_column_named():
    columns = ChatColumns(messages="conversations")
    with pytest.raises(ChatFormatError, match=r"^the 'conversations' cell is null \(empty\)"):
        messages_of({"conversations": None}, columns)


def test_a_null_messages_beside_prompt_and_response_reads_those():
    row = {"messages": None, "prompt": "2+2?", "response": "4"}
    assert messages_of(row, ChatColumns()) == [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
    ]


def test_a_row_without_the_column_is_still_said_to_lack_it():
    with pytest.raises(ChatFormatError, match=r"^no 'messages' column .*\(found: text\)"):
        messages_of({"text": "x"}, ChatColumns())
