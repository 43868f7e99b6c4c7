"""A run whose loss weighs each micro-batch alone (`loss_normalization: micro_batch`),
resumed on another number of ranks than its step was trained on, says so: each rank forms
its micro-batches from its own strided share of the rows, so the grouping, and with it the
loss, follows the rank count, which the run's config does not record. `global` trains the
same loss on any rank count and says nothing; the step's manifest records the count."""

from __future__ import annotations

from pathlib import Path

import pytest

from mfsdp_ckpt.format.layout import MFSDP, CheckpointPaths
from mfsdp_ckpt.format.manifest import Manifest
from trainer.config import SFTConfig
from trainer.grpo.config import GRPOConfig
from trainer.micro_batch_ranks import rank_change_warning


def _step(tmp_path: Path, world_size: int) -> CheckpointPaths:
    step = tmp_path / "run" / "global_step_3"
    step.mkdir(parents=True)
    manifest = Manifest(3, world_size, "fsdp2", ["model", "optimizer", "extra"], {})
    (step / "manifest.json").write_text(manifest.to_json())
    return CheckpointPaths(step / "dist_ckpt", step_dir=step, kind=MFSDP)


def _sft(normalization: str) -> SFTConfig:
    cfg = SFTConfig()
    cfg.data.loss_normalization = normalization
    return cfg


def _grpo(normalization: str) -> GRPOConfig:
    cfg = GRPOConfig()
    cfg.actor.loss_normalization = normalization
    return cfg


ROLLOUTS = (
    "each rank's sampling seed follows its rank and the prompts fall to other ranks, so the"
    " resumed steps sample other rollouts than an uninterrupted run would"
)
MICRO_BATCHES = (
    "with {key}.loss_normalization=micro_batch each rank's rows form other micro-batches,"
    " each its own token mean, so the resumed steps weigh tokens otherwise than an"
    " uninterrupted run would (the same rows per step)"
)


def _line(found: CheckpointPaths, *changes: str) -> str:
    return (
        f"warning: {found.manifest}: step 3 was trained on 2 rank(s), this run has 1:"
        f" {'; and '.join(changes)}; resumed on 2 rank(s) (--nproc-per-node x --nnodes),"
        " they train as before"
    )


def test_micro_batch_resumed_on_other_ranks_is_warned(tmp_path):
    found = _step(tmp_path, world_size=2)
    line = rank_change_warning(found, _sft("micro_batch"), 1)
    assert line == _line(found, MICRO_BATCHES.format(key="data"))


@pytest.mark.parametrize(
    ("normalization", "changes"),
    [
        ("micro_batch", (MICRO_BATCHES.format(key="actor"), ROLLOUTS)),
        ("global", (ROLLOUTS,)),
    ],
)
def test_grpo_resumed_on_other_ranks_is_warned_of_its_rollouts(tmp_path, normalization, changes):
    """Was: a GRPO resume on another rank count sampled other rollouts without a word
    (`global` loss), where SFT's and a thread-count change's resumes say so."""
    found = _step(tmp_path, world_size=2)
    assert rank_change_warning(found, _grpo(normalization), 1) == _line(found, *changes)


@pytest.mark.parametrize("config", [_sft, _grpo])
def test_same_ranks_say_nothing(tmp_path, config):
    found = _step(tmp_path, world_size=2)
    assert rank_change_warning(found, config("micro_batch"), 2) is None
    assert rank_change_warning(found, config("global"), 2) is None


def test_an_sft_global_loss_on_other_ranks_says_nothing(tmp_path):
    found = _step(tmp_path, world_size=2)
    assert rank_change_warning(found, _sft("global"), 1) is None


def test_a_step_without_a_manifest_says_nothing(tmp_path):
    step = tmp_path / "run" / "global_step_3"
    step.mkdir(parents=True)
    found = CheckpointPaths(step / "dist_ckpt", step_dir=step, kind=MFSDP)
    assert rank_change_warning(found, _sft("micro_batch"), 1) is None
