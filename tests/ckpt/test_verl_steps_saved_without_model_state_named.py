"""verl steps saved without dist_ckpt model state are named as what verl chose to save.

Was: a step saved with save_contents=[hf_model] was "not a checkpoint (looked for ...)",
with no word of its huggingface/ model; a v2 step whose ckpt_contents.json records no
"model" was "model/dist_ckpt: empty ...: this save did not finish", of a dir not there.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import save_file

from cli.launch import load_checked_config
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.format.checkpoint_resolution import resolve_checkpoint
from mfsdp_ckpt.format.verl_contents import VerlNoModelError
from tests.support.interop_layouts import BUILDERS
from trainer.config import ConfigError, SFTConfig


def _v2_without_model(made_optim, tmp_path, saved: list[str]):
    laid = BUILDERS["verl-rl-v2"](made_optim, tmp_path)
    actor = laid.levels["actor"]
    shutil.rmtree(actor / "model" / "dist_ckpt")
    record = json.loads((actor / "ckpt_contents.json").read_text())
    record["save_contents"] = saved
    (actor / "ckpt_contents.json").write_text(json.dumps(record))
    return laid, actor


def test_v1_step_with_only_its_hf_model_points_at_it(made_optim, tmp_path):
    laid = BUILDERS["verl-rl-v1"](made_optim, tmp_path, critic=False)
    actor = laid.levels["actor"]
    shutil.rmtree(actor / "dist_ckpt")
    save_file({"w": torch.zeros(2)}, actor / "huggingface" / "model.safetensors")
    with pytest.raises(layout.CheckpointPathError) as caught:
        resolve_checkpoint(laid.run)
    said = str(caught.value)
    assert f"give model.path={actor / 'huggingface'}" in said, said
    assert "not a checkpoint" not in said


def test_v2_step_saved_with_hf_model_alone_points_at_it(made_optim, tmp_path):
    laid, actor = _v2_without_model(made_optim, tmp_path, ["hf_model"])
    with pytest.raises(layout.CheckpointPathError) as caught:
        resolve_checkpoint(laid.run)
    said = str(caught.value)
    assert "save_contents=[hf_model]" in said, said
    assert f"give model.path={actor / 'model' / 'huggingface'}" in said, said


def test_v2_step_saved_without_the_model_holds_no_model_weights(made_optim, tmp_path):
    laid, actor = _v2_without_model(made_optim, tmp_path, ["optimizer"])
    with pytest.raises(VerlNoModelError) as caught:
        resolve_checkpoint(laid.run)
    said = str(caught.value)
    assert said.endswith(
        f"{actor}: checkpoint holds no model weights (ckpt_contents.json save_contents=[optimizer])"
    ), said
    assert "did not finish" not in said


def test_a_model_dist_ckpt_not_there_is_not_called_empty(made_optim, tmp_path):
    laid = BUILDERS["verl-rl-v2"](made_optim, tmp_path)
    actor = laid.levels["actor"]
    shutil.rmtree(actor / "model")
    with pytest.raises(layout.IncompleteCheckpointError) as caught:
        resolve_checkpoint(laid.run)
    assert f"{actor / 'model' / 'dist_ckpt'}: not there" in str(caught.value)


@pytest.mark.parametrize(
    ("saved", "said"),
    [(["optimizer"], "checkpoint holds no model weights"), (["hf_model"], "give model.path=")],
)
def test_model_path_names_the_same_reason_as_a_usage_error(
    saved, said, made_optim, tmp_path, monkeypatch
):
    """model.path naming such a run is a config naming weights that are not there (exit 2),
    with the ckpt commands' line after `model.path:`, never "neither ... nor a checkpoint"."""
    monkeypatch.chdir(tmp_path)
    laid, actor = _v2_without_model(made_optim, tmp_path, saved)
    with pytest.raises(ConfigError) as caught:
        load_checked_config(
            SFTConfig, None, [f"model.path={laid.run}", f"trainer.run_dir={tmp_path / 'rd'}"]
        )
    assert str(caught.value).startswith(f"model.path: {actor}: "), str(caught.value)
    assert said in str(caught.value)
    assert not (tmp_path / "rd").exists()
