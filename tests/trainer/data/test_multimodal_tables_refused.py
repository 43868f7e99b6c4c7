"""A data file of verl's multimodal layout (geo3k's: an `images` column, `<image>` in the
prompt) is refused naming the file and the column, by the GRPO and SFT loaders and by
`mfsdp config check`: its rows trained text-only without a word, the policy asked about a
figure it never saw. A JSON row whose `images` is null has none and reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.config_check import check_config
from mfsdp_ckpt.errors import MfsdpError
from tests.support.data_tables import write_parquet
from tests.support.sft import tiny_config
from trainer.data.sft_dataset import load_sft_splits
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import load_rl_prompts
from trainer.tiny import build_tokenizer

CHAT = [{"role": "user", "content": "<image>Find x."}, {"role": "assistant", "content": "3"}]


def _row(column: str, media: object) -> dict:
    return {
        "prompt": CHAT[:1],
        "messages": CHAT,
        "data_source": "hiyouga/geometry3k",
        "reward_model": {"ground_truth": "3"},
        column: media,
    }


def _line(path: Path, column: str) -> str:
    key = {"images": "data.image_key", "videos": "data.video_key"}[column]
    return (
        f"{path}: column '{column}' (verl's {key}): multimodal rows are not supported, the"
        f" models trained here read text alone (the prompts would train without their"
        f" {column}); drop the column to train on the text"
    )


@pytest.mark.parametrize("column", ["images", "videos"])
@pytest.mark.parametrize("suffix", ["parquet", "jsonl"])
def test_a_media_column_is_refused_by_train_and_check(tmp_path, column, suffix):
    path = tmp_path / f"geo3k.{suffix}"
    rows = [_row(column, [{"bytes": "iVBORw0KGgo=", "path": None}])] * 2
    if suffix == "parquet":
        write_parquet(rows, path)
    else:
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    tokenizer = build_tokenizer()
    refusals = []
    for load in (
        lambda: load_rl_prompts([str(path)], RLDataConfig(), tokenizer, custom_reward=True),
        lambda: load_sft_splits(tiny_config(path, tmp_path).data, tokenizer, 0, False),
        lambda: check_config("grpo", None, [f"data.train_files={path}", "trainer.device=cpu"]),
        lambda: check_config("sft", None, [f"data.train_files={path}", "trainer.device=cpu"]),
    ):
        with pytest.raises(MfsdpError) as caught:
            load()
        refusals.append((str(caught.value), caught.value.exit_code))
    assert refusals == [(_line(path, column), 2)] * 4


def test_a_null_media_cell_in_json_rows_reads(tmp_path):
    """A text row of a table that mixes in images: no placeholder in its prompt (one with
    `<image>` is refused, tests/grpo/test_tool_and_placeholder_rows_refused.py)."""
    path = tmp_path / "text.jsonl"
    row = {**_row("images", None), "prompt": [{"role": "user", "content": "Find x."}]}
    path.write_text(json.dumps(row) + "\n")
    prompts, _ = load_rl_prompts([str(path)], RLDataConfig(), build_tokenizer(), custom_reward=True)
    assert len(prompts) == 1
