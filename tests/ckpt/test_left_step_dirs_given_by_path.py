"""A step dir under a name it has only while it is no checkpoint is refused when given by
path, by one rule for both names: an unfinished save's `global_step_N.tmp/` and an old step
whose removal by `checkpoint.keep_last` was stopped, `.global_step_N.removing-PID/` (which
passed validate, export-hf, `checkpoint.resume=` and `model.path=`, even half deleted).
Each command and key says so in one line naming the run dir to give, exit 2."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from cli.main import app
from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.format.checkpoint_resolution import checkpoint_to_resume
from mfsdp_ckpt.format.left_step_names import REMOVING_TAG
from trainer.config import ModelConfig
from trainer.config_base import ConfigError
from trainer.model_source import resolve_model_source

STOPPED_REMOVAL = "an old step 1 whose removal by checkpoint.keep_last was stopped"
UNFINISHED_SAVE = "an unfinished save of step 1"


def _left_step(tmp_path: Path, kind: str, half_deleted: bool) -> tuple[Path, Path, str]:
    """(run dir, step 1 of it copied under `kind`'s name, the words naming it): the copy is
    whole, or without manifest and huggingface/ as a kill partway through its deletion
    leaves it."""
    run = tmp_path / "run"
    for step in (1, 2):
        state = {"model": {"w": torch.full((4,), float(step))}}
        Checkpointer(run, strategy="none").save(step, state, contents=("model",))
    step_1 = layout.step_dir(run, 1)
    if kind == "removing":
        left, words = run / f".{step_1.name}{REMOVING_TAG}{os.getpid()}", STOPPED_REMOVAL
    else:
        left, words = layout.tmp_step_dir(run, 1), UNFINISHED_SAVE
    shutil.copytree(step_1, left)
    if half_deleted:
        (left / layout.MANIFEST_FILE).unlink()
        shutil.rmtree(left / layout.HF_ASSETS_DIR, ignore_errors=True)
    return run, left, words


CASES = [("removing", False), ("removing", True), ("tmp", False)]


@pytest.mark.parametrize(("kind", "half_deleted"), CASES)
@pytest.mark.parametrize("command", [["validate"], ["inspect"], ["export-hf", "--out", "X"]])
def test_commands_refuse_it_in_one_line(tmp_path, kind, half_deleted, command):
    run, left, words = _left_step(tmp_path, kind, half_deleted)
    out = tmp_path / "exported"
    args = [str(out) if a == "X" else a for a in command]
    for given in (left, left / layout.DIST_CKPT_DIR):
        result = CliRunner().invoke(app, ["ckpt", args[0], str(given), *args[1:]])
        assert result.exit_code == 2, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1, result.output
        assert f"{given}: {words}" in lines[0]
        assert lines[0].endswith(f"give the run dir {run}")
    assert not out.exists()


@pytest.mark.parametrize(("kind", "half_deleted"), CASES)
def test_checkpoint_resume_and_model_path_refuse_it(tmp_path, kind, half_deleted):
    run, left, words = _left_step(tmp_path, kind, half_deleted)
    with pytest.raises(layout.CheckpointPathError) as refused_resume:
        checkpoint_to_resume(tmp_path / "new_run", str(left))
    assert str(refused_resume.value).startswith(f"{left}: {words}")
    assert str(refused_resume.value).endswith(f"give the run dir {run}")
    with pytest.raises(ConfigError) as refused:
        resolve_model_source(ModelConfig(path=str(left)))
    assert f"{left}: {words}" in str(refused.value)


def test_the_run_dir_itself_is_read(tmp_path):
    """What the refusal says to give reads the run's tracked step, the leftover beside it."""
    run, _left, _words = _left_step(tmp_path, "removing", half_deleted=False)
    assert checkpoint_to_resume(run, str(run)).step_dir == layout.step_dir(run, 2)
