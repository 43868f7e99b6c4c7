"""`mfsdp config check` (and train's launcher, before torch) refuses an `images` column in
every data file train opens, as train does before it reads a row, whichever first rows the
check leaves to train: a GRPO val file past the first, under `data.val_max_samples`, was said
ok, and train refused it only after loading the model."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cli.config_check import check_config
from mfsdp_ckpt.errors import MfsdpError
from tests.support.data_tables import read_rows, write_parquet
from tests.support.grpo import write_rl_rows


def test_a_later_val_file_with_images_is_refused_under_val_max_samples(tmp_path):
    good = write_rl_rows(tmp_path / "good.jsonl")
    images = write_parquet(
        [{**row, "images": [{"bytes": b"\x89PNG", "path": None}]} for row in read_rows(str(good))],
        tmp_path / "val_images.parquet",
    )
    checked = [
        f"data.train_files=[{good}]",
        f"data.val_files=[{good},{images}]",
        "data.val_max_samples=5",
        "data.max_prompt_length=32",
        "rollout.max_response_length=16",
        f"trainer.run_dir={tmp_path / 'r'}",
    ]
    with pytest.raises(MfsdpError) as caught:
        check_config("grpo", None, checked)
    assert str(caught.value).startswith(f"{images}: column 'images' (verl's data.image_key)")
    assert caught.value.exit_code == 2


@pytest.mark.parametrize("trainer", ["sft", "grpo"])
def test_a_parquet_whose_first_row_is_left_to_train_is_still_refused_for_images(tmp_path, trainer):
    """A first row group past a batch is not read here; its footer still is."""
    large = tmp_path / "large.parquet"
    rows = 20_000
    table = pa.table({"prompt": ["<image>x"] * rows, "images": [["f.png"]] * rows})
    pq.write_table(table, large, row_group_size=rows)
    with pytest.raises(MfsdpError, match=f"^{large}: column 'images'"):
        check_config(trainer, None, [f"data.train_files=[{large}]", f"trainer.run_dir={tmp_path}"])
