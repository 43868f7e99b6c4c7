"""The refusal of a prompt, response or chat content that is not text says what the value is
and how to go on: a NaN chat content (pandas' missing value) got the float32 hint, binary
data read "is a bytes", and a numeric prompt or response, which earlier mfsdp versions
trained on as `str(value)`, did not name that text, the one a run they trained continues
exactly on."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trainer.config import DataConfig
from trainer.data.chat import ChatFormatError
from trainer.data.sft_dataset import load_sft_splits
from trainer.tiny import build_tokenizer


def _refusal(path) -> str:
    cfg = DataConfig(train_files=[str(path)], val_ratio=0)
    with pytest.raises(ChatFormatError) as err:
        load_sft_splits(cfg, build_tokenizer(), 0, False)
    message = str(err.value)
    assert "\n" not in message
    return message


def test_a_nan_chat_content_is_a_missing_value(tmp_path):
    path = tmp_path / "m.jsonl"
    row = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": None}]}
    text = json.dumps(row).replace("null", "NaN")  # Python's json writes and reads NaN
    path.write_text(text + "\n")
    message = _refusal(path)
    assert "a chat turn's content is nan, a missing value" in message, message
    assert "float32" not in message and "column" not in message


def test_binary_response_is_named_binary_data(tmp_path):
    path = tmp_path / "b.parquet"
    pq.write_table(pa.table({"prompt": ["p"], "response": pa.array([b"\xff4"], pa.binary())}), path)
    message = _refusal(path)
    assert "the response ('response') is binary data (bytes), not text" in message, message
    assert "a bytes" not in message


@pytest.mark.parametrize(
    ("column", "trained"),
    [
        (pa.array([0.1], pa.float32()), "0.10000000149011612"),
        (pa.array([72], pa.int64()), "72"),
        (pa.array([2.5], pa.float64()), "2.5"),
    ],
    ids=["float32", "int64", "float64"],
)
def test_a_number_names_the_text_earlier_versions_trained(tmp_path, column, trained):
    path = tmp_path / "n.parquet"
    pq.write_table(pa.table({"prompt": ["p"], "response": column}), path)
    message = _refusal(path)
    assert message.endswith(
        f"; earlier mfsdp versions read it as '{trained}': store that text to continue such a"
        " run exactly"
    ), message


def test_a_number_in_a_chat_content_says_the_content(tmp_path):
    path = tmp_path / "m.jsonl"
    row = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": 7}]}
    path.write_text(json.dumps(row) + "\n")
    message = _refusal(path)
    assert "; store the content as text: a number's text is a guess" in message, message
    assert "earlier mfsdp versions" not in message  # such a row never trained
