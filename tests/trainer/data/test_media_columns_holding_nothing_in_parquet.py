"""A parquet file whose `images` (or `videos`) column holds nothing reads as one without it,
as a JSON table whose media cells are null or empty lists does: verl's text datasets, and
pandas writing a column of Nones (parquet's null type), have such a column. Train's loaders
and `mfsdp config check` refused the parquet file by its schema alone, and read the same
rows as JSON. A column holding media in a later row is still refused, naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mfsdp_ckpt.errors import MfsdpError
from tests.support.sft import tiny_config
from trainer.data.media_columns import refuse_media_columns
from trainer.data.sft_dataset import load_sft_splits
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import load_rl_prompts
from trainer.tiny import build_tokenizer

CHAT = [{"role": "user", "content": "What is 2 + 3?"}, {"role": "assistant", "content": "5"}]
IMAGE = {"bytes": b"\x89PNG", "path": None}
IMAGES = pa.list_(pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
TEXT = {
    "prompt": [CHAT[:1]] * 3,
    "messages": [CHAT] * 3,
    "data_source": ["openai/gsm8k"] * 3,
    "reward_model": [{"ground_truth": "5"}] * 3,
}
# each media column as a parquet file may hold nothing: its cells, and their arrow type
NOTHING = {
    "null-type": ([None] * 3, pa.null()),
    "list-all-null": ([None] * 3, IMAGES),
    "list-all-empty": ([[]] * 3, IMAGES),
    "list-null-and-empty": ([None, [], None], IMAGES),
}


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def _parquet(path: Path, media: dict[str, tuple[list, pa.DataType]]) -> Path:
    table = pa.table(TEXT)
    for name, (cells, kind) in media.items():
        table = table.append_column(name, pa.array(cells, type=kind))
    pq.write_table(table, path)
    return path


def _loaded(path: Path, tmp_path: Path, tokenizer) -> tuple[int, int]:
    """How many rows train's GRPO and SFT loaders read, after config check's look."""
    refuse_media_columns(path)
    prompts, _ = load_rl_prompts([str(path)], RLDataConfig(), tokenizer)
    train, _ = load_sft_splits(tiny_config(path, tmp_path).data, tokenizer, 0, False)
    return len(prompts), len(train)


@pytest.mark.parametrize("nothing", list(NOTHING))
@pytest.mark.parametrize("column", ["images", "videos"])
def test_a_parquet_media_column_holding_nothing_reads_as_json_nulls_do(
    tmp_path, tokenizer, nothing, column
):
    cells, _ = NOTHING[nothing]
    parquet = _parquet(tmp_path / "text.parquet", {column: NOTHING[nothing]})
    rows = [{key: values[at] for key, values in TEXT.items()} for at in range(3)]
    for row, cell in zip(rows, cells, strict=True):
        row[column] = cell
    jsonl = tmp_path / "text.jsonl"
    jsonl.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert _loaded(parquet, tmp_path, tokenizer) == _loaded(jsonl, tmp_path, tokenizer) == (3, 3)


@pytest.mark.parametrize("column", ["images", "videos"])
def test_a_parquet_media_column_holding_media_in_a_later_row_is_refused(tmp_path, column):
    path = _parquet(tmp_path / "mixed.parquet", {column: ([[], None, [IMAGE]], IMAGES)})
    with pytest.raises(MfsdpError) as caught:
        refuse_media_columns(path)
    assert str(caught.value).startswith(f"{path}: column '{column}' (verl's data.")
    assert caught.value.exit_code == 2
