"""`data.val_files: null` is "no validation files" wherever it is written.

verl's SFT trainer defaults to `data.val_files: null`. A YAML read as verl's took it (with a
note), but the same null in a file of mfsdp's section names, or as a `data.val_files=null`
override (verl's scripts write it), was refused ("expects a list of strings"), though it
means exactly mfsdp's default: no validation files.
"""

from __future__ import annotations

import yaml

from trainer.config import SFTConfig, load_config
from trainer.grpo.config import GRPOConfig


def test_null_in_an_mfsdp_file_is_no_validation_files(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"data": {"train_files": ["/d/t.parquet"], "val_files": None}}))
    assert load_config(SFTConfig, str(path)).data.val_files == []


def test_null_as_an_override_is_no_validation_files_even_over_files(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(
        yaml.safe_dump({"data": {"train_files": ["/d/t.parquet"], "val_files": ["/d/v.parquet"]}})
    )
    assert load_config(SFTConfig, str(path), ["data.val_files=null"]).data.val_files == []


def test_null_after_a_verl_key_on_the_command_line_too():
    cfg = load_config(
        SFTConfig,
        None,
        ["data.train_files=/d/t.parquet", "data.micro_batch_size_per_gpu=2", "data.val_files=null"],
    )
    assert (cfg.data.val_files, cfg.data.micro_batch_size) == ([], 2)


def test_grpo_takes_null_as_no_validation_files():
    cfg = load_config(GRPOConfig, None, ["data.train_files=/d/t.parquet", "data.val_files=null"])
    assert cfg.data.val_files == []
