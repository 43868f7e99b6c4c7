"""A parquet whose footer's statistics lie (an `images` column of flat bytes said null in
every row) is refused by `mfsdp config check` with the line train's loader refuses it with:
the check trusted the footer and said ok (exit 0), while the loader, reading every row,
refused the file at its first. Both judge the file by `refuse_media_columns`, which checks
a footer telling nothing against the column chunk's size and a row group's first cells."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cli.config_check import check_config
from mfsdp_ckpt.errors import MfsdpError
from tests.support.lying_parquet import footer_saying_all_null
from trainer.config import DataConfig
from trainer.data.sft_dataset import load_sft_splits
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import load_rl_prompts

ROWS = 40  # a null count of up to ROWS is one byte of the footer
IMAGE = bytes(range(256)) * 32  # 8 KiB: ten of them are more than nulls' levels could take
# where the images start: the first row (the first cells read tell), or past the first cells
# read (the chunk's size tells the statistics lie)
FIRST_IMAGE = pytest.mark.parametrize("nulls", [0, ROWS - 10], ids=["first-row", "later-row"])


def _lying(path: Path, text: dict[str, list], nulls: int) -> Path:
    """A table of the `text` columns and an `images` column of `nulls` nulls then images,
    its footer saying every image null."""
    images = pa.array([None] * nulls + [IMAGE] * (ROWS - nulls), pa.binary())
    table = pa.table({**text, "images": images})
    pq.write_table(table, path, compression="none", use_dictionary=False)
    return footer_saying_all_null(path, nulls)


@FIRST_IMAGE
def test_a_footer_saying_sft_images_null_is_refused_as_train_refuses_it(tmp_path, nulls):
    messages = [[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]]
    path = _lying(tmp_path / "lying.parquet", {"messages": messages * ROWS}, nulls)
    with pytest.raises(MfsdpError) as loaded:
        load_sft_splits(DataConfig(train_files=[str(path)]), None, 0, False)
    with pytest.raises(MfsdpError) as checked:
        check_config("sft", None, [f"data.train_files=[{path}]", f"trainer.run_dir={tmp_path}"])
    assert str(checked.value) == str(loaded.value)
    assert str(checked.value).startswith(f"{path}: column 'images' (verl's data.image_key)")
    assert checked.value.exit_code == 2


@FIRST_IMAGE
def test_a_footer_saying_grpo_images_null_is_refused_as_train_refuses_it(tmp_path, nulls):
    prompt = [[{"role": "user", "content": "What is 1+1?"}]] * ROWS
    truth = [{"ground_truth": "2"}] * ROWS
    columns = {"prompt": prompt, "data_source": ["openai/gsm8k"] * ROWS, "reward_model": truth}
    path = _lying(tmp_path / "lying.parquet", columns, nulls)
    with pytest.raises(MfsdpError) as loaded:
        load_rl_prompts([str(path)], RLDataConfig(train_files=[str(path)]), None)
    with pytest.raises(MfsdpError) as checked:
        check_config(
            "grpo",
            None,
            [
                f"data.train_files=[{path}]",
                "data.max_prompt_length=32",
                "rollout.max_response_length=16",
                f"trainer.run_dir={tmp_path}",
            ],
        )
    assert str(checked.value) == str(loaded.value)
    assert checked.value.exit_code == 2
