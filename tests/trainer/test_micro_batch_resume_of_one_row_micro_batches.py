"""A `loss_normalization: micro_batch` run whose micro-batches hold one row each (SFT's
padded `data.micro_batch_size: 1`, GRPO's `actor.ppo_micro_batch_size_per_gpu: 1`), resumed
on another number of ranks, is not warned that its tokens weigh otherwise: each row is its
own loss whichever rank takes it, so the step's loss is the same on any rank count. The
warning said so anyway. Packed micro-batches hold as many rows as their token budget
takes, so `data.micro_batch_size` alone does not make them one row each."""

from __future__ import annotations

from pathlib import Path

from mfsdp_ckpt.format.layout import MFSDP, CheckpointPaths
from mfsdp_ckpt.format.manifest import Manifest
from tests.trainer.test_micro_batch_resume_on_other_ranks_says_so import MICRO_BATCHES, ROLLOUTS
from trainer.config import SFTConfig
from trainer.grpo.config import GRPOConfig
from trainer.micro_batch_ranks import rank_change_warning


def _trained_on_two_ranks(tmp_path: Path) -> CheckpointPaths:
    step = tmp_path / "run" / "global_step_3"
    step.mkdir(parents=True)
    manifest = Manifest(3, 2, "fsdp2", ["model", "optimizer", "extra"], {})
    (step / "manifest.json").write_text(manifest.to_json())
    return CheckpointPaths(step / "dist_ckpt", step_dir=step, kind=MFSDP)


def _sft(packing: bool, micro_batch_size: int) -> SFTConfig:
    cfg = SFTConfig()
    cfg.data.loss_normalization = "micro_batch"
    cfg.data.packing = packing
    cfg.data.micro_batch_size = micro_batch_size
    return cfg


def test_sft_rows_alone_say_nothing(tmp_path):
    found = _trained_on_two_ranks(tmp_path)
    assert rank_change_warning(found, _sft(packing=False, micro_batch_size=1), 1) is None


def test_sft_micro_batches_of_more_rows_are_warned(tmp_path):
    found = _trained_on_two_ranks(tmp_path)
    said = MICRO_BATCHES.format(key="data")
    for cfg in (_sft(packing=False, micro_batch_size=2), _sft(packing=True, micro_batch_size=1)):
        line = rank_change_warning(found, cfg, 1)
        assert line is not None and said in line


def test_grpo_responses_alone_are_warned_of_their_rollouts_only(tmp_path):
    found = _trained_on_two_ranks(tmp_path)
    cfg = GRPOConfig()
    cfg.actor.loss_normalization = "micro_batch"
    cfg.actor.ppo_micro_batch_size_per_gpu = 1
    line = rank_change_warning(found, cfg, 1)
    assert line is not None and ROLLOUTS in line
    assert "loss_normalization" not in line
    cfg.actor.ppo_micro_batch_size_per_gpu = 2
    line = rank_change_warning(found, cfg, 1)
    assert line is not None and MICRO_BATCHES.format(key="actor") in line
