"""Every "not found" of a relative path the user gave says the directory it was read from, as
model.path's and data.train_files' did: `mfsdp ckpt validate runs/demo/sft` and `--config
examples/sft_tiny_cpu.yaml` given from another directory said only "no such file"."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from cli.main import app
from mfsdp_ckpt.convert.hf_config import HFConfigError, load_hf_config
from mfsdp_ckpt.format.closest_path import where_relative
from mfsdp_ckpt.format.hub_id import missing_hf_config
from trainer.config import ConfigError, SFTConfig, load_config
from trainer.data.files import DataFileError, check_data_file


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return f"relative paths are read from {tmp_path}"


def test_a_checkpoint_path_not_found(elsewhere):
    done = CliRunner().invoke(app, ["ckpt", "validate", "runs/demo/sft"])
    assert done.exit_code == 2, done.output
    assert done.stderr == f"error: runs/demo/sft: no such file or directory; {elsewhere}\n"


def test_a_config_file_not_found(elsewhere):
    with pytest.raises(ConfigError) as err:
        load_config(SFTConfig, "examples/sft_tiny_cpu.yaml")
    assert str(err.value) == (
        f"examples/sft_tiny_cpu.yaml: cannot read config (No such file or directory); {elsewhere}"
    )


def test_the_other_inputs_not_found(elsewhere):
    with pytest.raises(DataFileError, match=f"^data/train.parquet: no such file; {elsewhere}$"):
        check_data_file("data/train.parquet")
    with pytest.raises(HFConfigError, match=f"^model/config.json: no such file; {elsewhere}$"):
        load_hf_config("model/config.json")
    assert (
        missing_hf_config("model") == f"--hf-config model: no such file or directory; {elsewhere}"
    )


def test_an_absolute_path_or_a_removed_directory_says_nothing_more(tmp_path, monkeypatch):
    assert where_relative(tmp_path / "x") == ""
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    assert where_relative("x") == ""
