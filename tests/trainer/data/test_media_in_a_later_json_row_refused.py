"""A JSON table whose later rows hold images (or videos) is refused by train's loaders naming
the file, the row and the column, as one whose first row holds them is: a text table with
geo3k's rows appended passed and trained those rows as text, the policy asked about a figure
it never saw. `mfsdp config check` looks at a file's first row alone (cheap, before torch
loads); the loaders read every row. Rows whose media cells are null read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mfsdp_ckpt.errors import MfsdpError
from tests.support.sft import tiny_config
from trainer.data.media_columns import refuse_media_columns
from trainer.data.sft_dataset import load_sft_splits
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import load_rl_prompts
from trainer.tiny import build_tokenizer

CHAT = [{"role": "user", "content": "What is 2 + 3?"}, {"role": "assistant", "content": "5"}]
IMAGE = [{"bytes": "iVBORw0KGgo=", "path": None}]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def _row(**media: object) -> dict:
    return {
        "prompt": CHAT[:1],
        "messages": CHAT,
        "data_source": "openai/gsm8k",
        "reward_model": {"ground_truth": "5"},
        **media,
    }


def _write(path: Path, rows: list[dict]) -> Path:
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    else:
        path.write_text(json.dumps(rows))
    return path


@pytest.mark.parametrize("column", ["images", "videos"])
@pytest.mark.parametrize("first", [{}, {"images": None, "videos": None}], ids=["absent", "null"])
@pytest.mark.parametrize("suffix, third", [(".jsonl", ":3"), (".json", " row 3")])
def test_a_later_row_holding_media_is_refused_naming_it(
    tmp_path, tokenizer, column, first, suffix, third
):
    path = _write(tmp_path / f"mixed{suffix}", [_row(**first), _row(), _row(**{column: IMAGE})])
    key = {"images": "data.image_key", "videos": "data.video_key"}[column]
    line = (
        f"{path}{third}: column '{column}' (verl's {key}): multimodal rows are not supported,"
        " the models trained here read text alone (the prompts would train without their"
        f" {column}); drop the column to train on the text"
    )
    for load in (
        lambda: load_rl_prompts([str(path)], RLDataConfig(), tokenizer),
        lambda: load_sft_splits(tiny_config(path, tmp_path).data, tokenizer, 0, False),
    ):
        with pytest.raises(MfsdpError) as caught:
            load()
        assert (str(caught.value), caught.value.exit_code) == (line, 2)


@pytest.mark.parametrize("empty", [None, []], ids=["null", "empty-list"])
def test_rows_whose_media_cells_hold_nothing_read_without_them(tmp_path, tokenizer, empty):
    """verl writes `"images": []` on the text rows of a dataset that mixes in images: such a
    row holds no image, first or later, and reads as null does (config check agrees)."""
    rows = [_row(images=empty, videos=empty), _row(), _row(images=empty, videos=empty)]
    path = _write(tmp_path / "text.jsonl", rows)
    prompts, _ = load_rl_prompts([str(path)], RLDataConfig(), tokenizer)
    train, _ = load_sft_splits(tiny_config(path, tmp_path).data, tokenizer, 0, False)
    assert (len(prompts), len(train)) == (3, 3)
    refuse_media_columns(path)  # config check's look at the first row: nothing refused
