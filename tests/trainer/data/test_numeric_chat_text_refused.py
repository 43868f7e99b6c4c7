"""A prompt, response or chat content that is a number is refused, naming the file, row,
column and type: it was trained on as `str(value)`, a float32 column's 0.3 as
"0.30000001192092896" and an integer column holding a null (pandas stores it as float64) as
"72.0", where verl's SFT dataset stops on it (`response + eos_token`)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trainer.config import DataConfig
from trainer.data.chat import ChatFormatError
from trainer.data.sft_dataset import load_sft_splits
from trainer.tiny import build_tokenizer

HINT = "store the column as text"
PROMPTS = [f"What is {i}/10?" for i in range(3)]


def _refusal(path, **keys) -> str:
    cfg = DataConfig(train_files=[str(path)], val_ratio=0, **keys)
    with pytest.raises(ChatFormatError) as err:
        load_sft_splits(cfg, build_tokenizer(), 0, False)
    return str(err.value)


@pytest.mark.parametrize(
    "column, said",
    [
        (pa.array([0.1, 0.2, 0.3], pa.float32()), "is a float 0.10000000149011612, not text"),
        (pa.array([0.5, 1.5, 2.5], pa.float64()), "is a float 0.5, not text"),
        (pa.array([72, 73, 74], pa.int64()), "is an int 72, not text"),
    ],
    ids=["float32", "float64", "int64"],
)
def test_a_numeric_response_column_is_refused(tmp_path, column, said):
    path = tmp_path / "numbers.parquet"
    pq.write_table(pa.table({"prompt": PROMPTS, "response": column}), path)
    message = _refusal(path)
    assert message.startswith(f"{path} row 1: the response ('response') {said}; {HINT}"), message


def test_an_integer_column_with_a_null_is_refused_not_trained_as_72_0(tmp_path):
    """pandas writes an integer column holding a null as float64 (the null NaN): 72 reads
    72.0."""
    path = tmp_path / "ints.parquet"
    column = pa.array([72.0, float("nan"), 74.0], pa.float64())
    pq.write_table(pa.table({"prompt": PROMPTS, "response": column}), path)
    message = _refusal(path)
    assert message.startswith(f"{path} row 1: the response ('response') is a float 72.0"), message


@pytest.mark.parametrize(
    "row, said",
    [
        ({"prompt": "How many?", "response": 72}, "the response ('response') is an int 72"),
        ({"prompt": 7, "response": "seven"}, "the prompt ('prompt') is an int 7"),
        (
            {"extra_info": {"question": "How many?", "answer": 7.5}},
            "the response ('extra_info.answer') is a float 7.5",
        ),
        (
            {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": 7}]},
            "role and content must be text",
        ),
    ],
    ids=["response", "prompt", "struct-field", "messages-content"],
)
def test_a_jsonl_number_is_refused(tmp_path, row, said):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(row) + "\n")
    keys = {}
    if "extra_info" in row:
        keys = {
            "prompt_key": "extra_info",
            "response_key": "extra_info",
            "prompt_dict_keys": ["question"],
            "response_dict_keys": ["answer"],
        }
    message = _refusal(path, **keys)
    assert message.startswith(f"{path}:1: "), message
    where = "the content" if "messages" in row else "the column"
    assert (
        said in message
        and (
            f"store {where} as text: a number's text is a guess (a float32 0.3 reads"
            " 0.30000001192092896)"
        )
        in message
    ), message


def test_text_that_spells_a_number_still_trains(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"prompt": "What is 3/10?", "response": "0.3"}) + "\n")
    train, _ = load_sft_splits(
        DataConfig(train_files=[str(path)], val_ratio=0), build_tokenizer(), 0, False
    )
    assert len(train) == 1 and train[0].num_targets > 0
