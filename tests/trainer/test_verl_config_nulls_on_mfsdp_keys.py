"""A verl config's null on a key of mfsdp's own name that takes no null is verl's "not set".

The config verl's SFT trainer prints has `data.val_files: null`; `mfsdp config from-verl`
converted it (the mfsdp default stays, with a note) but `mfsdp train sft --config` of the
same file stopped on it ("expects a list of strings"), though docs/verl.md says a verl YAML
given to `--config` is read as `from-verl` reads it. An mfsdp file's null there is still
refused: nothing says it means "not set" there.
"""

from __future__ import annotations

import logging

import pytest
import yaml

from tests.support.paths import REPO
from trainer.config import ConfigError, SFTConfig, load_config

PRINTED = REPO / "tests" / "fixtures" / "verl_configs" / "sft_trainer_engine.printed.yaml"


def write(tmp_path, tree) -> str:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return str(path)


def test_the_printed_verl_config_null_val_files_is_mfsdps_default(tmp_path, caplog):
    printed = yaml.safe_load(PRINTED.read_text())
    assert printed["data"]["val_files"] is None
    printed["data"]["train_files"] = "/d/train.parquet"
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"):
        cfg = load_config(SFTConfig, write(tmp_path, printed))
    assert (cfg.data.train_files, cfg.data.val_files) == (["/d/train.parquet"], [])
    assert "data.val_files: null in verl, the mfsdp default stays" in caplog.text


def test_a_null_an_mfsdp_key_takes_is_kept_in_a_verl_config(tmp_path, caplog):
    tree = {
        "data": {"train_files": ["/d/t.parquet"], "micro_batch_size_per_gpu": 2},
        "trainer": {"total_steps": None},
    }
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"):
        cfg = load_config(SFTConfig, write(tmp_path, tree))
    assert cfg.trainer.total_steps is None
    assert cfg.data.micro_batch_size == 2  # the verl key was read: this is a verl config
    assert "total_steps: null in verl" not in caplog.text


def test_an_mfsdp_configs_null_list_is_still_refused(tmp_path):
    tree = {"data": {"train_files": None}}
    with pytest.raises(ConfigError) as err:
        load_config(SFTConfig, write(tmp_path, tree))
    assert "config key 'data.train_files' expects a list of strings, got null" in str(err.value)


def test_an_mfsdp_config_with_keys_verl_shares_keeps_refusing_nulls(tmp_path):
    """optim.betas and optim.weight_decay are read with verl's keys too, but a file of them
    alone is mfsdp's own: its null on optim.clip_grad was replaced by the default 1.0."""
    tree = {
        "data": {"train_files": ["/d/t.parquet"]},
        "optim": {"betas": [0.9, 0.95], "weight_decay": 0.1, "clip_grad": None},
    }
    with pytest.raises(ConfigError) as err:
        load_config(SFTConfig, write(tmp_path, tree))
    assert "config key 'optim.clip_grad' expects" in str(err.value)
