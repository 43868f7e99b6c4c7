"""`mfsdp train sft|grpo --config` and `mfsdp config from-verl` tell SFT and GRPO configs
apart by the same keys, verl's names counted as the loader reads them. A verl SFT trainer
YAML (`data.train_batch_size`, `model.partial_pretrain`, ...) was refused by `train sft` as
"a GRPO config (it has data.train_batch_size)" while from-verl printed `mfsdp train sft`."""

from __future__ import annotations

import pytest
import yaml

from trainer.config import ConfigError, SFTConfig, load_config
from trainer.config_kind import refuse_other_kind
from trainer.grpo.config import GRPOConfig
from trainer.verl_import import convert_verl

VERL_SFT = {
    "data": {"train_files": "d/train.parquet", "train_batch_size": 8},
    "model": {"partial_pretrain": "init_model"},
    "trainer": {"default_local_dir": "verl_sft", "total_training_steps": 2},
}
VERL_SFT_MICRO = {**VERL_SFT, "data": {**VERL_SFT["data"], "micro_batch_size_per_gpu": 2}}
VERL_PPO = {
    "data": {"train_batch_size": 16, "max_response_length": 128},
    "actor_rollout_ref": {"actor": {"ppo_mini_batch_size": 8}, "rollout": {"n": 4}},
}
VERL_PPO_PATH_ONLY = {"actor_rollout_ref": {"model": {"path": "m"}}, "trainer": {"nnodes": 1}}
MFSDP_GRPO = {"actor": {"ppo_mini_batch_size": 8}, "rollout": {"n": 4}}
MFSDP_SFT = {"data": {"val_ratio": 0.1, "max_length": 64}}
CLASSES = {"sft": SFTConfig, "grpo": GRPOConfig}


def _yaml(tmp_path, tree) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(tree))
    return str(path)


def test_a_verl_sft_yaml_is_taken_by_train_sft_and_loads(tmp_path):
    path = _yaml(tmp_path, VERL_SFT)
    refuse_other_kind(SFTConfig, path)
    cfg = load_config(SFTConfig, path)
    assert (cfg.data.global_batch_size, cfg.model.path, cfg.trainer.total_steps) == (
        8,
        "init_model",
        2,
    )


def test_a_verl_sft_key_only_sft_takes_names_an_sft_config_to_train_grpo(tmp_path):
    path = _yaml(tmp_path, VERL_SFT_MICRO)
    with pytest.raises(ConfigError) as err:
        refuse_other_kind(GRPOConfig, path)
    assert str(err.value) == (
        f"{path}: looks like an SFT config (it has data.micro_batch_size_per_gpu):"
        " use mfsdp train sft"
    )


@pytest.mark.parametrize("tree", [MFSDP_GRPO, VERL_PPO], ids=["mfsdp", "verl"])
def test_a_grpo_config_is_still_named_to_train_sft(tmp_path, tree):
    path = _yaml(tmp_path, tree)
    with pytest.raises(ConfigError, match=r"looks like a GRPO config .*: use mfsdp train grpo$"):
        refuse_other_kind(SFTConfig, path)


@pytest.mark.parametrize(
    "tree, command",
    [
        (VERL_SFT, "sft"),
        (VERL_SFT_MICRO, "sft"),
        (VERL_PPO, "grpo"),
        (VERL_PPO_PATH_ONLY, "grpo"),
    ],
    ids=["verl-sft", "verl-sft-micro", "verl-ppo", "verl-ppo-path"],
)
def test_from_verl_names_the_command_that_takes_the_file(tmp_path, tree, command):
    path = _yaml(tmp_path, tree)
    assert convert_verl(path).command == command
    refuse_other_kind(CLASSES[command], path)  # the printed command takes the file
