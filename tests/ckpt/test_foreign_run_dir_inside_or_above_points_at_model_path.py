"""A step, role or model dir of another trainer's run given as `trainer.run_dir`, or a dir
holding one such run: the line says what starts a run from it (`model.path=RUN` with
another trainer.run_dir), as the run dir's own refusal does.

Was: "is a checkpoint; give trainer.run_dir=RUN to resume the run it belongs to" and
"holds the run RUN; give that to resume it", after which RUN was refused as a run mfsdp
does not resume.
"""

from __future__ import annotations

import pytest

from cli.launch import load_checked_config
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.format.foreign_run_dirs import foreign_run_words
from tests.support.interop_layouts import BUILDERS
from trainer.config import ConfigError, SFTConfig

LEVELS = [("megatron-lm", "step"), ("verl-rl-v1", "actor"), ("verl-rl-v2", "model")]


def _refusal(run_dir) -> str:
    with pytest.raises((ConfigError, layout.CheckpointPathError)) as caught:
        load_checked_config(SFTConfig, None, [f"trainer.run_dir={run_dir}"])
    return str(caught.value)


@pytest.mark.parametrize(("kind", "level"), LEVELS)
def test_a_dir_inside_a_foreign_run_points_at_model_path(
    kind, level, made_optim, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    laid = BUILDERS[kind](made_optim, tmp_path)
    said = _refusal(laid.levels[level])
    assert f"{laid.run} is a run dir of layout {kind}, not an mfsdp run" in said, said
    assert said.endswith(f"give model.path={laid.run} with another trainer.run_dir"), said
    assert "to resume" not in said


def test_a_dir_holding_one_foreign_run_points_at_model_path(made_optim, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    laid = BUILDERS["verl-rl-v1"](made_optim, tmp_path / "holder")
    said = _refusal(tmp_path / "holder")
    words = foreign_run_words(laid.run)
    assert words is not None
    assert (
        said
        == f"trainer.run_dir: {tmp_path / 'holder'} holds the run {laid.run}; {laid.run} {words}"
    )
