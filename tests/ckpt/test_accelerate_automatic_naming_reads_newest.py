"""Accelerate's automatic checkpoint naming (`ProjectConfiguration(automatic_checkpoint_naming=
True)`: `save_state()` writes `PROJECT/checkpoints/checkpoint_<i>/`) given as its
`checkpoints/` folder or its project dir reads the newest save, the one `load_state()`
resumes, with a note; each save reads as it did given itself. Such a dir is no run dir
for mfsdp to save into.

Was: "not a checkpoint (looked for ..., checkpoint-N/)", exit 2, for the folder and the
project alike.
"""

from __future__ import annotations

import shutil

import pytest
import torch

from cli.launch import load_checked_config
from mfsdp_ckpt.format import layout
from tests.ckpt.test_interop_hf_trainer import save_trainer_checkpoint
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from trainer.config import ConfigError, SFTConfig


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """PROJECT/checkpoints/checkpoint_{2,10}: save_state's DCP dirs, no trainer_state.json."""
    model = tiny_causal_lm("qwen2", vocab=64)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    root = tmp_path_factory.mktemp("accelerate")
    made = save_trainer_checkpoint(root / "made", 4, model, optimizer)
    project = root / "proj"
    for i in (2, 10):  # by number: "checkpoint_2" > "checkpoint_10" as text
        save = project / "checkpoints" / f"checkpoint_{i}"
        save.mkdir(parents=True)
        for name in ("pytorch_model_fsdp_0", "optimizer_0"):
            shutil.copytree(made / name, save / name)
    return project


@pytest.mark.parametrize("level", ["project", "folder"])
def test_the_newest_save_is_read_with_a_note(level, project):
    folder = project / "checkpoints"
    given = project if level == "project" else folder
    code, out, err = run_cli("ckpt", "inspect", given)
    assert code == 0, out + err
    assert f"{folder / 'checkpoint_10' / 'pytorch_model_fsdp_0'}" in out, out
    assert (
        f"checkpoint_10 is the newest of Accelerate's automatic-naming saves in {folder}, the"
        " one load_state() resumes; other saves here: checkpoint_2"
    ) in out + err, out + err


def test_an_unfinished_newest_save_is_named_with_the_others(project, tmp_path):
    copy = tmp_path / "proj"
    shutil.copytree(project, copy)
    (copy / "checkpoints" / "checkpoint_10" / "pytorch_model_fsdp_0" / ".metadata").unlink()
    code, out, err = run_cli("ckpt", "inspect", copy)
    line = one_error_line(err)
    assert code != 0 and "checkpoint_10" in line, out + err
    assert line.endswith("load_state() resumes; other saves here: checkpoint_2)"), line


def test_the_project_is_no_run_dir(project, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for given in (project, project / "checkpoints"):
        with pytest.raises((ConfigError, layout.CheckpointPathError)) as caught:
            load_checked_config(SFTConfig, None, [f"trainer.run_dir={given}"])
        assert f"{given} is a run dir of layout hf-trainer" in str(caught.value)
        assert not (given / "config.yaml").exists()
