"""`--config RUN/config.yaml` of a run dir moved or copied since: its recorded
`trainer.run_dir` is another directory, and the run is refused (exit 2) before anything
starts, in one line naming both and the `trainer.run_dir=` override that picks one.

Was: trained from step 0 into the recorded (gone) path, or, of a copy, continued the
original run and saved into it; exit 0 both, the steps beside the config never read."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

from cli.launch import load_checked_config
from mfsdp_ckpt.checkpointer import Checkpointer
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.config import RESOLVED_CONFIG_FILE, ConfigError, SFTConfig, write_resolved_config


def _run(tmp_path, run_dir: str):
    """A run dir `run_dir` (as given, from `tmp_path`) holding its config.yaml and step 4."""
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=8)
    write_resolved_config(tmp_path / run_dir, tiny_config(data, Path(run_dir)))
    Checkpointer(tmp_path / run_dir, strategy="none").save(
        4, {"model": {"w": torch.ones(2, 2)}}, contents=("model",)
    )
    return tmp_path / run_dir


def _refusal(config) -> str:
    with pytest.raises(ConfigError) as caught:
        load_checked_config(SFTConfig, str(config), [])
    return str(caught.value)


@pytest.mark.parametrize("how", ["moved", "copied"])
def test_a_moved_or_copied_runs_config_is_refused_naming_both_dirs(tmp_path, how):
    old = _run(tmp_path, str(tmp_path / "run"))
    new = tmp_path / "elsewhere" / "run"
    (shutil.move if how == "moved" else shutil.copytree)(old, new)
    config = new / RESOLVED_CONFIG_FILE
    assert _refusal(config) == (
        f"{config}: the config of the run in {new} (steps up to global_step_4), but it records"
        f" trainer.run_dir={old}, another directory (the run was moved or copied since);"
        f" pass trainer.run_dir={new} to continue the run beside it, or"
        f" trainer.run_dir={old} to train in the recorded one"
    )
    assert not (old / "global_step_0").exists()  # nothing trained anywhere
    cfg = load_checked_config(SFTConfig, str(config), [f"trainer.run_dir={new}"])
    assert cfg.trainer.run_dir == str(new)


def test_a_run_dir_recorded_relative_works_from_its_own_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _run(tmp_path, "runs/rel")
    cfg = load_checked_config(SFTConfig, os.path.join("runs", "rel", RESOLVED_CONFIG_FILE), [])
    assert cfg.trainer.run_dir == "runs/rel"
    monkeypatch.chdir(tmp_path / "runs")  # from elsewhere, it names runs/runs/rel
    config = os.path.join("rel", RESOLVED_CONFIG_FILE)
    assert _refusal(config) == (
        f"{config}: the config of the run in rel (steps up to global_step_4), but it records"
        " the relative trainer.run_dir=runs/rel, and the run's relative paths are read from"
        f" the current directory ({tmp_path / 'runs'}): run it from the directory it was"
        " started in"
    )
