"""Every row number a user reads counts from 1: a .jsonl row by its line (`t.jsonl:2`), a
parquet or .json array row by its place (`t.parquet row 2`), so the second row of either is
"2". Was: a parquet row and a .json item were counted from 0 (`row 1`, `item 1` for the second),
a .jsonl line from 1, so the same row had two numbers by the file it came in."""

from __future__ import annotations

import json

import pytest

from tests.support.data_tables import write_parquet
from trainer.data.files import DataFileError, read_rows_with_origins
from trainer.data.math_datasets import gsm8k_rows
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import RLDataError, load_rl_prompts
from trainer.tiny import build_tokenizer


def _rl_row(truth: str | None) -> dict:
    return {
        "prompt": [{"role": "user", "content": "What is 3 + 4?"}],
        "data_source": "openai/gsm8k",
        "reward_model": {"style": "rule", "ground_truth": truth},
    }


def _write(rows: list[dict], path):
    if path.suffix == ".parquet":
        return write_parquet(rows, path)
    if path.suffix == ".json":
        path.write_text(json.dumps(rows))
    else:
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.mark.parametrize(
    "name, second",
    [("rl.jsonl", "{path}:2"), ("rl.parquet", "{path} row 2"), ("rl.json", "{path} row 2")],
)
def test_the_second_row_is_numbered_2_in_every_format(tmp_path, name, second):
    path = _write([_rl_row("7"), _rl_row(None)], tmp_path / name)
    with pytest.raises(RLDataError) as raised:
        load_rl_prompts([str(path)], RLDataConfig(), build_tokenizer())
    assert str(raised.value) == second.format(path=path) + ": reward_model.ground_truth is null"


def test_a_json_array_item_that_is_no_object_is_named_as_its_row(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('[{"a": 1}, 5]')
    with pytest.raises(DataFileError, match=rf"^{path} row 2: not a JSON object \(int\)"):
        read_rows_with_origins([str(path)])


def test_converted_rows_without_a_file_count_from_1():
    rows = [{"question": "q", "answer": "a #### 5"}, {"question": "q", "answer": "no marker"}]
    with pytest.raises(DataFileError, match=r"^row 2: answer has no '#### <number>' line"):
        gsm8k_rows(rows, "train")
