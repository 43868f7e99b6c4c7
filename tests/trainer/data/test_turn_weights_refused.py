"""OpenAI's fine-tuning format marks an assistant turn not to train with `weight: 0`; no
weight is read here (nor by verl), so such a turn trained as a target without a word. A
weight other than 1 on an assistant turn is refused naming the turn; 1 and null (a parquet
struct's absent key) change nothing and train."""

from __future__ import annotations

import pytest

from trainer.config import DataConfig
from trainer.data.chat import ChatFormatError
from trainer.data.sft_dataset import tokenize_rows
from trainer.tiny import build_tokenizer


def chat(first: object, second: object) -> dict:
    return {
        "messages": [
            {"role": "user", "content": "hi", "weight": None},
            {"role": "assistant", "content": "BAD_REPLY", "weight": first},
            {"role": "user", "content": "again", "weight": None},
            {"role": "assistant", "content": "GOOD_REPLY", "weight": second},
        ]
    }


def tokenized(row: dict):
    data = DataConfig(max_length=512)
    return tokenize_rows([row], data, build_tokenizer(), lambda i: f"w.jsonl:{i + 1}", False)


@pytest.mark.parametrize("weight", [0, 0.0, 0.5, False])
def test_a_weight_that_is_not_one_is_refused(weight):
    with pytest.raises(ChatFormatError) as refused:
        tokenized(chat(weight, 1))
    line = str(refused.value)
    assert line.startswith("w.jsonl:1: ") and f"turn 2 ('assistant') has weight {weight!r}" in line
    assert "nor by verl" in line and "drop the turn" in line and "\n" not in line


@pytest.mark.parametrize("weights", [(1, 1), (None, 1), (None, None)])
def test_weight_one_or_null_trains(weights):
    assert len(tokenized(chat(*weights))) == 1
