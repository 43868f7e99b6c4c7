"""Lines that name a run or a next command found from a path the user typed: a dir holding
runs one level further down names them ("holds one run" read runs/sft_tiny beside
runs/demo/sft), a run_dir given as a step names its run as typed (relative where it was),
and the commands named are the ones this user types (`./dev mfsdp ...` under `./dev`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mfsdp_ckpt.command_as_run import DEV_SCRIPT
from mfsdp_ckpt.format.layout import MANIFEST_FILE, TRACKER_FILE
from tests.support.interop_layouts import run_cli
from trainer.config import ConfigError, no_config_file
from trainer.local_paths import check_run_dir_outside_checkpoints


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(DEV_SCRIPT, "./dev")
    return tmp_path


def make_run(run: str) -> str:
    os.makedirs(f"{run}/global_step_4")
    Path(run, TRACKER_FILE).write_text("4")
    Path(run, "global_step_4", MANIFEST_FILE).write_text(json.dumps({"format_version": 1}))
    return run


def test_a_run_one_level_down_is_named_not_read(here):
    make_run("runs/demo/sft")
    code, _out, err = run_cli("ckpt", "validate", "runs")
    assert (code, err) == (
        2,
        "error: runs: not a checkpoint; it holds the run runs/demo/sft a level further down:"
        " give that\n",
    )


def test_runs_at_two_depths_are_counted_and_listed(here):
    make_run("runs/demo/sft")
    make_run("runs/sft_tiny")
    code, _out, err = run_cli("ckpt", "validate", "runs")
    assert (code, err) == (
        2,
        "error: runs: holds 2 runs; give one of them (runs/sft_tiny, runs/demo/sft)\n",
    )


def test_a_run_dir_given_as_a_step_names_its_run_as_typed(here):
    make_run("runs/sft")
    with pytest.raises(ConfigError) as raised:
        check_run_dir_outside_checkpoints("runs/sft/global_step_4")
    assert str(raised.value) == (
        "trainer.run_dir: runs/sft/global_step_4 is a checkpoint; give trainer.run_dir=runs/sft"
        " to resume the run it belongs to"
    )


def test_next_commands_are_named_as_this_user_types_them(here):
    make_run("run")
    code, _out, err = run_cli("ckpt", "import-hf", "run", "--out", "out")
    assert code == 2 and "`./dev mfsdp ckpt export-hf run --out DIR`" in err, err
    assert "`./dev mfsdp config defaults sft > sft.yaml`" in no_config_file("sft")
    Path("sft.yaml").write_text("model:\n  shape: tiny\n")
    code, _out, err = run_cli("config", "from-verl", "sft.yaml")
    assert code == 2 and "`./dev mfsdp train sft|grpo --config sft.yaml`" in err, err
