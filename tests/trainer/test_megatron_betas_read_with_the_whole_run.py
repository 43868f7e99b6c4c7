"""verl's Megatron betas rule reads the whole run, file and command line together: a
Megatron key given on the command line replaced the betas the user's own YAML set
(0.9, 0.98 trained as Megatron's 0.999), where the same key in the file kept them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainer.config import SFTConfig, load_config, set_dotted
from trainer.grpo.config import GRPOConfig

BETAS = [0.9, 0.98]
MEGATRON_KEYS = [
    ("actor_rollout_ref.actor.megatron.tensor_model_parallel_size", 1),
    ("optim._target_", "verl.workers.config.McoreOptimizerConfig"),
]


def _betas(tmp_path: Path, in_file: dict[str, Any], overrides: list[str]) -> list[float]:
    tree: dict[str, Any] = {"data": {"train_files": ["x.jsonl"]}}
    for key, value in in_file.items():
        set_dotted(tree, key, value)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(tree))
    given = [*in_file, *(override.split("=", 1)[0] for override in overrides)]
    # actor_rollout_ref is a section of verl's GRPO trainer only
    cls = GRPOConfig if any(key.startswith("actor_rollout_ref.") for key in given) else SFTConfig
    return load_config(cls, path, overrides).optim.betas


def _override(key: str, value: Any) -> str:
    return f"{key}={json.dumps(value)}"


@pytest.mark.parametrize("key, value", MEGATRON_KEYS)
def test_a_megatron_key_on_the_command_line_reads_the_files_betas(tmp_path, key, value):
    both_in_file = _betas(tmp_path, {"optim.betas": BETAS, key: value}, [])
    on_command_line = _betas(tmp_path, {"optim.betas": BETAS}, [_override(key, value)])
    assert on_command_line == both_in_file


@pytest.mark.parametrize("key, value", MEGATRON_KEYS)
def test_betas_on_the_command_line_read_the_files_megatron_key(tmp_path, key, value):
    both_in_file = _betas(tmp_path, {"optim.betas": BETAS, key: value}, [])
    on_command_line = _betas(tmp_path, {key: value}, [_override("optim.betas", BETAS)])
    assert on_command_line == both_in_file


def test_mfsdps_own_betas_in_the_file_stand_beside_a_megatron_setting(tmp_path):
    key, value = MEGATRON_KEYS[0]
    assert _betas(tmp_path, {"optim.betas": BETAS}, [_override(key, value)]) == BETAS


@pytest.mark.parametrize("key, value", MEGATRON_KEYS)
def test_megatrons_betas_where_the_run_sets_none_wherever_its_key_is(tmp_path, key, value):
    in_file = _betas(tmp_path, {key: value}, [])
    on_command_line = _betas(tmp_path, {}, [_override(key, value)])
    assert in_file == on_command_line != SFTConfig().optim.betas
