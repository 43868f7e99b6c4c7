"""A checkpoint an error finds at or above a path the user typed is named as that path was
typed (relative where it was, as README promises of every path an error names), and a next
command is named as this user types it (`./dev mfsdp ...` under `./dev`). Was: the
checkpoint absolute (`finding_runs.checkpoint_containing` resolves it) and bare `mfsdp`,
which a `./dev` user does not have on PATH; import-hf's --out inside a checkpoint told
export-hf's --overwrite rule."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cli.launch import data_hint
from mfsdp_ckpt.command_as_run import DEV_SCRIPT
from mfsdp_ckpt.format.finding_runs import checkpoint_as_given
from mfsdp_ckpt.format.layout import MANIFEST_FILE, TRACKER_FILE
from mfsdp_ckpt.format.output_inside import inside_checkpoint
from tests.support.interop_layouts import run_cli
from trainer.config import ConfigError, SFTConfig
from trainer.config_kind import refuse_other_kind

STEP = "run/global_step_4"


@pytest.fixture
def run(tmp_path, monkeypatch):
    """A run with one saved step (its markers only), in the working dir, for a `./dev`
    user."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(DEV_SCRIPT, "./dev")
    os.makedirs(STEP)
    Path("run", TRACKER_FILE).write_text("4")
    Path(STEP, MANIFEST_FILE).write_text(json.dumps({"format_version": 1, "files": {}}))
    return Path("run")


def test_the_checkpoint_found_above_a_relative_path_is_named_relative(run):
    assert checkpoint_as_given(f"{STEP}/dist_ckpt/x") == Path(STEP)
    assert checkpoint_as_given(os.path.abspath(STEP)) == Path(os.path.abspath(STEP))
    assert checkpoint_as_given("elsewhere") is None


def test_an_out_inside_a_checkpoint_names_it_as_typed(run):
    assert inside_checkpoint(f"{STEP}/hf") == f"lies inside the checkpoint {STEP}"
    assert inside_checkpoint("run/global_step_9/hf") == (
        "lies in run/global_step_9, which is the name of a checkpoint step of the run run"
        " (its saves write there; none is saved there now)"
    )


def test_import_hf_out_inside_a_checkpoint_tells_its_own_overwrite_rule(run):
    Path("hf").mkdir()
    Path("hf", "config.json").write_text("{}")
    code, _out, err = run_cli("ckpt", "import-hf", "hf", "--out", f"{STEP}/imp")
    assert (code, err) == (
        2,
        f"error: {STEP}/imp: lies inside the checkpoint {STEP}; choose an --out outside it"
        " (--overwrite replaces only an empty directory or an earlier import-hf output of"
        " the same --layout)\n",
    )


def test_import_hf_given_a_checkpoint_names_it_as_typed(run):
    code, _out, err = run_cli("ckpt", "import-hf", STEP, "--out", "out")
    assert code == 2
    assert err.startswith(
        f"error: {STEP}: no config.json; not a Hugging Face model dir; it is (or lies in) the"
        f" training checkpoint {STEP}: "
    ), err


def test_a_verl_script_given_as_config_names_the_conversion_as_typed(run):
    Path("run.sh").write_text("python3 -m verl.trainer.main_ppo x=1\n")
    with pytest.raises(ConfigError) as raised:
        refuse_other_kind(SFTConfig, "run.sh")
    assert "convert it with `./dev mfsdp config from-verl run.sh > config.yaml`" in str(
        raised.value
    )


def test_a_missing_data_file_names_the_data_commands_as_typed(run):
    Path("sft.yaml").write_text("data:\n  train_files: [nothing.parquet]\n")
    code, _out, err = run_cli("config", "check", "sft", "--config", "sft.yaml")
    assert code == 2 and err.endswith(f"; {data_hint('sft')}\n"), err
    assert data_hint("sft") == (
        "make it with `./dev mfsdp data gsm8k|math --input OFFICIAL_FILE --out DIR` (writes"
        " DIR/sft/<split>.parquet) or `./dev mfsdp data synthetic --out DIR`"
    )
