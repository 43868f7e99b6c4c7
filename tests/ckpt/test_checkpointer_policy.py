"""Checkpointer policy in one process: contents rules, retention, resume choice, paths."""

from __future__ import annotations

import pytest
import torch

from mfsdp_ckpt.checkpointer import CheckpointContentsError, Checkpointer, load_checkpoint
from mfsdp_ckpt.format import checkpoint_resolution, layout, run_steps
from tests.support.fsdp_workloads import build, train
from trainer.state import ModelState, OptimizerState


@pytest.fixture
def model_and_optimizer():
    model, optimizer = build(sharded=False)
    train(model, optimizer, 1)
    return model, optimizer


def states(model, optimizer, step):
    return {
        "model": ModelState(model),
        "optimizer": OptimizerState(model, optimizer),
        "extra": {"step": step},
    }


def test_optimizer_without_model_is_refused(tmp_path, model_and_optimizer):
    checkpointer = Checkpointer(tmp_path, strategy="none")
    with pytest.raises(CheckpointContentsError, match="'optimizer' needs 'model'"):
        checkpointer.save(1, states(*model_and_optimizer, 1), contents=("optimizer", "extra"))
    with pytest.raises(CheckpointContentsError, match="unknown item"):
        checkpointer.save(1, states(*model_and_optimizer, 1), contents=("model", "weights"))
    assert not any(tmp_path.iterdir())


def test_keep_last_prunes_only_after_commit(tmp_path, model_and_optimizer):
    checkpointer = Checkpointer(tmp_path, strategy="none", keep_last=2)
    for step in (1, 2, 3, 4):
        checkpointer.save(step, states(*model_and_optimizer, step))
    assert run_steps.list_complete_steps(tmp_path) == [3, 4]
    assert run_steps.read_tracker(tmp_path) == 4


def test_resume_auto_ignores_incomplete_and_temporary_steps(tmp_path, model_and_optimizer):
    checkpointer = Checkpointer(tmp_path, strategy="none")
    checkpointer.save(2, states(*model_and_optimizer, 2))
    (tmp_path / "global_step_5.tmp" / "dist_ckpt").mkdir(parents=True)  # crashed save
    (tmp_path / "global_step_1" / "dist_ckpt").mkdir(parents=True)  # no manifest, older
    assert checkpointer.find_resume("auto").step == 2
    assert checkpointer.find_resume("disable") is None
    assert Checkpointer(tmp_path / "fresh", strategy="none").find_resume("auto") is None


def test_load_only_model_from_a_model_only_checkpoint(tmp_path, model_and_optimizer):
    model, _optimizer = model_and_optimizer
    Checkpointer(tmp_path, strategy="none").save(
        1, {"model": ModelState(model)}, contents=("model",)
    )
    fresh, fresh_optimizer = build(sharded=False)
    paths = checkpoint_resolution.resolve_checkpoint(tmp_path)
    with pytest.raises(CheckpointContentsError, match="holds \\['model'\\], not \\['optimizer'"):
        load_checkpoint(paths, states(fresh, fresh_optimizer, 0))
    load_checkpoint(paths, {"model": ModelState(fresh)}, contents=("model",))
    for (name, a), b in zip(model.named_parameters(), fresh.parameters()):
        assert torch.equal(a, b), name


def test_resolve_checkpoint_accepts_three_kinds_of_path(tmp_path, model_and_optimizer):
    Checkpointer(tmp_path, strategy="none").save(3, states(*model_and_optimizer, 3))
    step = layout.step_dir(tmp_path, 3)
    for given in (tmp_path, step, step / "dist_ckpt"):
        assert checkpoint_resolution.resolve_checkpoint(given).dist_ckpt == step / "dist_ckpt"
    assert checkpoint_resolution.resolve_checkpoint(step / "dist_ckpt").step == 3
    (tmp_path / "empty").mkdir()
    with pytest.raises(layout.CheckpointPathError, match="not a checkpoint"):
        checkpoint_resolution.resolve_checkpoint(tmp_path / "empty")


def test_resaving_a_step_replaces_it_whole(tmp_path, model_and_optimizer):
    model, optimizer = model_and_optimizer
    checkpointer = Checkpointer(tmp_path, strategy="none")
    checkpointer.save(1, states(model, optimizer, 1))
    train(model, optimizer, 1)
    checkpointer.save(1, states(model, optimizer, 1))
    fresh, fresh_optimizer = build(sharded=False)
    load_checkpoint(
        checkpoint_resolution.resolve_checkpoint(tmp_path), states(fresh, fresh_optimizer, 0)
    )
    assert torch.equal(fresh.model.norm.weight, model.model.norm.weight)
    assert not list(tmp_path.glob("*old*")) and not list(tmp_path.glob("*.tmp"))
