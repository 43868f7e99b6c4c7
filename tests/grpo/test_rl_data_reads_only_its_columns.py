"""GRPO rows are read through the columns the run uses: `data.prompt_key`, `reward_model`,
`data_source` and `extra_info` (what verl's RLHFDataset and reward manager read). A parquet
column beside them whose values Python cannot hold (a nanosecond timestamp, pandas'
`to_parquet` default) refused the whole file by the column's name; it is now never decoded
(nor any other column the run does not read), and one it reads is still refused, naming it."""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trainer.data.files import DataFileError
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import load_rl_prompts
from trainer.tiny import build_tokenizer

PROMPT = [{"role": "user", "content": "What is 3 + 4?"}]
NANOSECONDS = 1_700_000_000_123_456_789  # not a whole microsecond
ROWS = 3


def _table(path: Path, prompt_key: str = "prompt", **columns: pa.Array) -> Path:
    pq.write_table(
        pa.table(
            {
                prompt_key: pa.array([PROMPT] * ROWS),
                "data_source": pa.array(["openai/gsm8k"] * ROWS),
                "reward_model": pa.array([{"style": "rule", "ground_truth": "7"}] * ROWS),
                "extra_info": pa.array([{"index": i} for i in range(ROWS)]),
                **columns,
            }
        ),
        path,
    )
    return path


def _stamps() -> pa.Array:
    return pa.array([NANOSECONDS] * ROWS, type=pa.timestamp("ns"))


@pytest.mark.parametrize("prompt_key", ["prompt", "question"])
def test_a_column_grpo_does_not_read_is_not_decoded(tmp_path, caplog, prompt_key):
    table = _table(tmp_path / "rl.parquet", prompt_key, created_at=_stamps())
    cfg = RLDataConfig(train_files=[str(table)], prompt_key=prompt_key)
    with caplog.at_level(logging.WARNING, logger="mfsdp.data"):
        prompts, dropped = load_rl_prompts([str(table)], cfg, build_tokenizer())
    assert (len(prompts), dropped) == (ROWS, 0)
    assert [p.extra_info for p in prompts] == [{"index": i} for i in range(ROWS)]
    assert [p.ground_truth for p in prompts] == ["7"] * ROWS
    assert "created_at" not in caplog.text


@pytest.mark.parametrize("column", ["data_source", "extra_info", "reward_model"])
def test_a_column_grpo_reads_is_still_refused_naming_it(tmp_path, column):
    table = tmp_path / "rl.parquet"
    _table(table)
    data = pq.read_table(table)
    data = data.set_column(data.schema.get_field_index(column), column, _stamps())
    pq.write_table(data, table)
    with pytest.raises(DataFileError) as refused:
        load_rl_prompts([str(table)], RLDataConfig(), build_tokenizer())
    said = str(refused.value)
    assert said.startswith(
        f"{table}: column {column!r} (timestamp[ns]) holds values Python cannot hold"
    ), said
