"""GRPO's sample dirs (`trainer.rollout_data_dir`, `trainer.validation_data_dir`) are written
to as `trainer.run_dir` is, and read alike: a `..` is taken away before anything checks them
(`DIR/new/..` kept as typed named nothing while `new` did not exist)."""

from __future__ import annotations

import pytest

from trainer.config import load_config
from trainer.grpo.config import GRPOConfig


@pytest.mark.parametrize("key", ["rollout_data_dir", "validation_data_dir"])
def test_a_sample_dir_through_dot_dot_is_the_dir_it_reaches(tmp_path, key):
    given = {"rollout_data_dir": "samples/a", "validation_data_dir": "samples/b"}
    given[key] = f"{tmp_path}/samples/new/.."
    loaded = load_config(GRPOConfig, overrides=[f"trainer.{k}={v}" for k, v in given.items()])
    assert getattr(loaded.trainer, key) == f"{tmp_path}/samples"
    other = "validation_data_dir" if key == "rollout_data_dir" else "rollout_data_dir"
    assert getattr(loaded.trainer, other) == given[other]  # no `..`: kept as typed
    assert loaded.trainer.run_dir == GRPOConfig().trainer.run_dir


def test_unset_sample_dirs_stay_unset():
    loaded = load_config(GRPOConfig, overrides=[])
    assert (loaded.trainer.rollout_data_dir, loaded.trainer.validation_data_dir) == (None, None)
