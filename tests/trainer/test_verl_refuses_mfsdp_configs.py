"""`mfsdp config from-verl` refuses a YAML without a key of verl's (exit 2): the repository's
own examples/sft_tiny_cpu.yaml "converted" at exit 0 with verl's defaults written over its
settings (trainer.seed 0 became 1, data.micro_batch_size 2 became 4), and
examples/grpo_tiny_cpu.yaml exited 1 naming algorithm.adv_estimator as not carried over. A
YAML with verl keys and mfsdp keys both still converts, the mfsdp keys kept as written, and so
does a verl override file made only of keys verl and mfsdp share (`data.train_files`,
`algorithm.adv_estimator`, ...): refused, it went to `mfsdp train` with mfsdp's defaults.
Shared means shared with the trainer config the command converts from: main_ppo has `model`,
`rollout` and `optim` under `actor_rollout_ref` only, so a GRPO file with a top-level
`model.path`, `rollout.n` or `optim.lr` is mfsdp's (it converted, verl's defaults written over
it, at exit 0)."""

from __future__ import annotations

import pytest
import yaml

from tests.support.fresh_python import mfsdp
from tests.support.verl_conversions import WRITTEN
from trainer.config import load_config
from trainer.grpo.config import GRPOConfig
from trainer.verl_import import _SHARED_WITH_VERL, VerlSourceError, _leaves, convert_verl

VERL_PPO_CONFIG = "tests/fixtures/verl_configs/_generated_ppo_trainer.yaml"


def _yaml(tmp_path, tree) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(tree))
    return str(path)


@pytest.mark.parametrize("example, trainer", [("sft_tiny_cpu", "sft"), ("grpo_tiny_cpu", "grpo")])
def test_the_repositorys_mfsdp_configs_are_refused_naming_their_trainer(example, trainer):
    path = f"examples/{example}.yaml"
    done = mfsdp("config", "from-verl", path)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        f"error: {path}: an mfsdp config (every key in it is mfsdp's, and model.shape is not"
        f" verl's), not one to convert: give it to `mfsdp train {trainer} --config {path}`"
    ]


@pytest.mark.parametrize(
    "tree, trainers",
    [
        ({"actor": {"ppo_mini_batch_size": 8}, "rollout": {"n": 4}}, "grpo"),
        ({"data": {"val_ratio": 0.1}, "strategy": {"name": "fsdp2"}}, "sft"),
        ({"model": {"path": "m"}, "trainer": {"run_dir": "r"}}, "sft|grpo"),  # either takes it
    ],
)
def test_a_yaml_of_mfsdp_keys_only_names_the_trainers_that_take_it(tmp_path, tree, trainers):
    path = _yaml(tmp_path, tree)
    with pytest.raises(VerlSourceError, match=rf"`mfsdp train {trainers} --config {path}`$"):
        convert_verl(path)


@pytest.mark.parametrize("tree", [{}, {"model": {}}])
def test_a_yaml_that_sets_nothing_is_refused(tmp_path, tree):
    path = _yaml(tmp_path, tree)
    with pytest.raises(VerlSourceError, match=r"sets nothing; not a verl config$"):
        convert_verl(path)


def test_verl_keys_with_mfsdp_keys_convert_keeping_the_mfsdp_keys(tmp_path):
    tree = {
        "actor_rollout_ref": {"model": {"path": "m"}, "rollout": {"n": 4}},
        "algorithm": {"adv_estimator": "grpo"},
        "strategy": {"name": "fsdp2"},
        "trainer": {"seed": 0},
    }
    conversion = convert_verl(_yaml(tmp_path, tree))
    assert conversion.command == "grpo" and conversion.dropped == []
    assert (
        conversion.tree["strategy"]["name"] == "fsdp2" and conversion.tree["trainer"]["seed"] == 0
    )
    assert (conversion.tree["model"]["path"], conversion.tree["rollout"]["n"]) == ("m", 4)
    assert any(WRITTEN in note for note in conversion.notes)  # verl's run: verl's defaults
    written = tmp_path / "grpo.yaml"
    written.write_text(conversion.to_yaml("config.yaml"))
    assert load_config(GRPOConfig, str(written)).strategy.name == "fsdp2"


def test_a_hydra_defaults_list_makes_the_yaml_verls(tmp_path):
    """`defaults:` is Hydra's, which verl's configs use: mfsdp keys beside it convert."""
    tree = {"defaults": ["ppo_trainer", "_self_"], "data": {"max_prompt_length": 32}}
    conversion = convert_verl(_yaml(tmp_path, tree))
    assert conversion.tree["data"]["max_prompt_length"] == 32


_GRPO_OVERRIDES = {
    "data": {"train_files": "t.parquet", "val_files": "v.parquet", "train_batch_size": 64},
    "algorithm": {"adv_estimator": "grpo"},
    "trainer": {"project_name": "p", "experiment_name": "e", "val_before_train": False},
}


@pytest.mark.parametrize(
    "tree, command",
    [
        (_GRPO_OVERRIDES, "grpo"),
        ({"data": {"train_files": "t.parquet", "max_length": 512}, "trainer": {"seed": 3}}, "sft"),
        ({"trainer": {"project_name": "p", "experiment_name": "e"}}, "sft"),
    ],
)
def test_a_verl_override_file_of_shared_keys_only_converts_with_verls_defaults(
    tmp_path, tree, command
):
    conversion = convert_verl(_yaml(tmp_path, tree))
    assert conversion.command == command and conversion.dropped == []
    assert any(WRITTEN in note for note in conversion.notes)  # verl's run: verl's defaults


def test_an_mfsdp_only_key_among_shared_keys_is_refused_naming_it(tmp_path):
    tree = {**_GRPO_OVERRIDES, "checkpoint": {"save_every": 5}}
    path = _yaml(tmp_path, tree)
    with pytest.raises(VerlSourceError, match=r"and checkpoint\.save_every is not verl's\)"):
        convert_verl(path)


# an mfsdp GRPO config of keys verl has, but main_ppo only under actor_rollout_ref
MFSDP_GRPO = {
    "algorithm": {"adv_estimator": "grpo"},
    "model": {"path": "/m/Qwen2.5-0.5B"},
    "data": {"train_files": ["/d/train.parquet"], "max_prompt_length": 512},
    "rollout": {"n": 8, "name": "vllm"},
    "optim": {"lr": 1.0e-6},
    "trainer": {"seed": 0},
}


def _example_without_mfsdp_only_sections() -> dict:
    """examples/grpo_tiny_cpu.yaml's data, optim and rollout name and n: keys of verl's
    generation and SFT configs, none at the top level of main_ppo's."""
    with open("examples/grpo_tiny_cpu.yaml") as example:
        tree = yaml.safe_load(example)
    rollout = {key: tree["rollout"][key] for key in ("name", "n")}
    return {"data": tree["data"], "optim": tree["optim"], "rollout": rollout}


@pytest.mark.parametrize(
    "tree, named",
    [
        (MFSDP_GRPO, "model.path"),
        (_example_without_mfsdp_only_sections(), "optim.lr"),
        ({"data": {"train_files": "t.parquet"}, "rollout": {"n": 4}}, "rollout.n"),
    ],
    ids=["mfsdp-grpo", "grpo-example", "rollout-n"],
)
def test_a_grpo_yaml_with_keys_main_ppo_has_only_under_actor_rollout_ref_is_refused(
    tmp_path, tree, named
):
    path = _yaml(tmp_path, tree)
    with pytest.raises(VerlSourceError, match=rf"and {named} is not verl's\), .* train grpo "):
        convert_verl(path)


def test_the_keys_shared_for_grpo_are_top_level_keys_of_main_ppos_config():
    with open(VERL_PPO_CONFIG) as config:
        main_ppo = {key for key, _value in _leaves(yaml.safe_load(config))}
    assert _SHARED_WITH_VERL["grpo"] <= main_ppo
