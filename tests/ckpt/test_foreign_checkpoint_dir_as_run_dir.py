"""A dir that `ckpt inspect` reads, or refuses, as another tool's checkpoint, given as
`trainer.run_dir`: the HF Trainer's output dir, Accelerate's save_state dir, a torchtitan
dump folder. Each is refused before anything starts (exit 2), naming what it is and, for
one mfsdp reads, `model.path=` it with another run dir.

Was: accepted as an empty run; mfsdp saved its steps beside the other tool's, after which
`ckpt inspect` of the dir read mfsdp's run, not the checkpoint `model.path=DIR` had read.
"""

from __future__ import annotations

import shutil

import pytest
import torch

from cli.launch import load_checked_config
from mfsdp_ckpt.format import layout
from tests.ckpt.test_interop_hf_trainer import save_trainer_checkpoint
from tests.ckpt.test_interop_torchtitan import _dump
from tests.support.hf_to_mcore import tiny_causal_lm
from trainer.config import ConfigError, SFTConfig


@pytest.fixture(scope="module")
def trainer_output(tmp_path_factory):
    """The Trainer's output dir with checkpoint-2 and checkpoint-4."""
    model = tiny_causal_lm("qwen2", vocab=64)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    run = tmp_path_factory.mktemp("trainer") / "output"
    for step in (2, 4):
        save_trainer_checkpoint(run, step, model, optimizer)
    return run


def _refusal(run_dir) -> str:
    before = sorted(p.name for p in run_dir.iterdir())
    with pytest.raises((ConfigError, layout.CheckpointPathError)) as caught:
        load_checked_config(SFTConfig, None, [f"trainer.run_dir={run_dir}"])
    assert sorted(p.name for p in run_dir.iterdir()) == before  # nothing written into it
    return str(caught.value)


def test_the_trainers_output_dir_is_refused(trainer_output, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    said = _refusal(trainer_output)
    assert said == (
        f"trainer.run_dir: {trainer_output} is a run dir of layout hf-trainer, not an mfsdp"
        " run: mfsdp does not resume it or save into it; to train from its step 4, give"
        f" model.path={trainer_output} with another trainer.run_dir"
    ), said


def test_an_output_dir_whose_newest_save_did_not_finish_is_refused(
    trainer_output, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "output"
    shutil.copytree(trainer_output, run)
    (run / "checkpoint-6").mkdir()  # a save killed before it wrote anything
    said = _refusal(run)
    assert said.startswith(f"trainer.run_dir: {run} is a run dir of layout hf-trainer"), said
    assert said.endswith(f"give model.path={run / 'checkpoint-4'} with another trainer.run_dir")


def test_an_accelerate_save_state_dir_is_refused(trainer_output, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    saved = tmp_path / "accelerate"
    saved.mkdir()
    for name in ("pytorch_model_fsdp_0", "optimizer_0"):  # save_state writes no trainer_state
        shutil.copytree(trainer_output / "checkpoint-4" / name, saved / name)
    said = _refusal(saved)
    assert said.startswith(f"trainer.run_dir: {saved} is a run dir of layout hf-trainer"), said
    assert said.endswith(f"give model.path={saved} with another trainer.run_dir"), said


@pytest.mark.parametrize("level", ["dump", "checkpoint"])
def test_a_torchtitan_folder_is_refused(level, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    dump = _dump(tmp_path, steps=(10,))
    given = dump if level == "dump" else dump / "checkpoint"
    said = _refusal(given)
    assert said.startswith(
        f"trainer.run_dir: {given} is another trainer's run dir, which mfsdp does not resume or"
        f" save into: {given}: a torchtitan checkpoint"
    ), said


def test_a_dir_of_other_files_is_still_a_run_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("plans\n")
    cfg = load_checked_config(SFTConfig, None, [f"trainer.run_dir={run}"])
    assert cfg.trainer.run_dir == str(run)
