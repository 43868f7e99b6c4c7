"""A verl key is for the trainer whose verl config has its top-level section: any key of
main_ppo's `actor_rollout_ref` (or `critic`, `algorithm`, ...) given to `mfsdp train sft` is
refused as GRPO's in one line, and a key of verl's SFT `engine` a rule maps (or its top-level
`use_remove_padding`) given to `train grpo` as SFT's. The actor's `optim.lr`,
`optim.clip_grad`, `model.path`, `model.lora_rank` and `enable_gradient_checkpointing` trained
an SFT run with a note, while the actor's `grad_clip`, the same setting in verl, was refused.
verl's SFT names in a section both mfsdp commands have (`optim.lr_warmup_steps_ratio`,
`model.partial_pretrain`) are read by `train grpo` as the mfsdp key they set, with a note."""

from __future__ import annotations

import logging

import pytest
import yaml

from trainer import verl_keys
from trainer.config import ConfigError, SFTConfig, load_config
from trainer.config_kind import kind_of
from trainer.grpo.config import GRPOConfig
from trainer.verl_inert_keys import SECTIONS
from trainer.verl_rules import MIRRORS, RULES, TRAINER_SECTIONS, NotCarried

CLASSES = {"sft": SFTConfig, "grpo": GRPOConfig}
# main_ppo's keys that a rule reads as a key SFT takes too, and those it refused already
ACTOR_KEYS_SFT_TOOK = [
    "actor_rollout_ref.actor.optim.lr=3e-3",
    "actor_rollout_ref.actor.optim.clip_grad=1.0",
    "actor_rollout_ref.model.path=/nonexist",
    "actor_rollout_ref.model.lora_rank=8",
    "actor_rollout_ref.model.enable_gradient_checkpointing=true",
    "+actor_rollout_ref.actor.optim.weight_decay=0.1",
]
ACTOR_KEYS_SFT_REFUSED = [
    "actor_rollout_ref.actor.grad_clip=1.0",
    "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=8",
]
OTHER_MAIN_PPO_KEYS = [
    "algorithm.adv_estimator=grpo",  # mfsdp's GRPO key of verl's name
    "critic.optim.lr=1e-5",
    "reward_model.enable=false",
    "actor_rollout_ref.model.use_remove_padding=null",  # a null was a note
]
SFT_KEYS_GRPO_REFUSES = ["use_remove_padding=true"]
# verl's SFT names in mfsdp's own sections of both commands: grpo reads them with a note
SFT_NAMES_IN_SHARED_SECTIONS = [
    "model.partial_pretrain=/nonexist",
    "model.enable_gradient_checkpointing=true",
    "optim.lr_scheduler=cosine",
    "optim.warmup_steps_ratio=0.1",
    "optim.lr_warmup_steps_ratio=0.1",
    "optim.grad_clip=1.0",
]


def _refused_as(command: str, override: str) -> str:
    key = override.partition("=")[0].lstrip("+")
    other = "grpo" if command == "sft" else "sft"
    return f"verl key '{key}' is for mfsdp train {other}, not {command}"


@pytest.mark.parametrize(
    "override", ACTOR_KEYS_SFT_TOOK + ACTOR_KEYS_SFT_REFUSED + OTHER_MAIN_PPO_KEYS
)
def test_a_main_ppo_key_given_to_sft_is_refused_as_grpos(override):
    with pytest.raises(ConfigError) as err:
        load_config(SFTConfig, None, [override])
    assert str(err.value) == f"command-line override: {_refused_as('sft', override)}"
    load_config(GRPOConfig, None, [override])  # the trainer named takes it


@pytest.mark.parametrize("override", SFT_KEYS_GRPO_REFUSES)
def test_a_verl_sft_key_given_to_grpo_is_refused_as_sfts(override):
    with pytest.raises(ConfigError) as err:
        load_config(GRPOConfig, None, [override])
    assert str(err.value) == f"command-line override: {_refused_as('grpo', override)}"
    load_config(SFTConfig, None, [override])


@pytest.mark.parametrize("override", SFT_NAMES_IN_SHARED_SECTIONS)
def test_verl_sft_names_in_a_section_both_commands_have_carry_in_both(override):
    """A GRPO config's `optim:` with verl's `lr_warmup_steps_ratio` ran with a note; it must
    not be sent to `train sft`."""
    for cls in CLASSES.values():
        load_config(cls, None, [override])


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("optim.total_training_steps=10", "set trainer.total_steps instead"),
        ("optim.min_lr_ratio=0.1", "set optim.min_lr to min_lr_ratio x lr"),
        ("engine.no_such_key=1", "unknown config key 'engine'"),
    ],
)
def test_grpo_keeps_its_own_advice_for_keys_neither_command_takes(override, said):
    """Sent to `train sft` as SFT's, these were refused there too: the advice is the key's."""
    with pytest.raises(ConfigError) as err:
        load_config(GRPOConfig, None, [override])
    assert said in str(err.value) and "is for mfsdp train" not in str(err.value)


def test_the_same_in_a_yaml_file(tmp_path):
    path = tmp_path / "sft.yaml"
    tree = {"actor_rollout_ref": {"actor": {"optim": {"lr": 3e-3}}}}
    path.write_text(yaml.safe_dump(tree))
    with pytest.raises(ConfigError, match=r"is for mfsdp train grpo, not sft$"):
        load_config(SFTConfig, path)


@pytest.mark.parametrize("command", ["sft", "grpo"])
def test_every_mapped_key_of_the_other_trainers_sections_is_refused(command):
    """Every key a rule, a mirror or an ignored section names, under a section of the other
    trainer's alone, at verl's "not set" as well (noted and dropped before)."""
    other = "grpo" if command == "sft" else "sft"
    cls = CLASSES[command]
    keys = [*RULES, *MIRRORS, *(section + "some_key" for section in SECTIONS)]
    theirs = [
        key
        for key in keys
        if key.split(".", 1)[0] in TRAINER_SECTIONS[other] and not verl_keys.is_native(cls, key)
    ]
    assert len(theirs) > 20
    for key in theirs:
        with pytest.raises(NotCarried) as err:
            verl_keys.carry_over(cls, [(key, None)], own=True)
        assert err.value.text == _refused_as(command, key), key


@pytest.mark.parametrize(
    "override",
    ["optim.lr=1e-5", "optim.clip_grad=1.0", "model.path=/m", "model.lora_rank=8"]
    + ["checkpoint.save_every=5", "trainer.total_epochs=2", "data.train_files=[x.jsonl]"],
)
def test_keys_both_trainers_take_stay_both(override):
    for cls in CLASSES.values():
        load_config(cls, None, [override])


def test_each_trainers_own_verl_keys_still_carry_over(caplog):
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"):
        grpo = load_config(GRPOConfig, None, ACTOR_KEYS_SFT_TOOK)
        sft = load_config(SFTConfig, None, ["model.partial_pretrain=/m", "optim.grad_clip=0.5"])
    assert (grpo.optim.lr, grpo.optim.clip_grad, grpo.model.path) == (3e-3, 1.0, "/nonexist")
    assert (grpo.model.lora_rank, grpo.model.activation_checkpointing) == (8, True)
    assert (sft.model.path, sft.optim.clip_grad) == ("/m", 0.5)


def test_a_typo_of_mfsdps_own_key_in_a_shared_section_is_still_named():
    with pytest.raises(
        ConfigError, match=r"unknown config key 'model\.pth'; did you mean model\.path"
    ):
        load_config(GRPOConfig, None, ["model.pth=/m"])


def test_a_hydra_selection_is_still_named_as_one():
    with pytest.raises(ConfigError, match=r"engine=megatron selects a file of verl's config"):
        load_config(GRPOConfig, None, ["engine=megatron"])


def test_typo_hints_offer_only_the_commands_own_verl_keys():
    assert not [key for key in verl_keys.names("sft") if key.startswith("actor_rollout_ref.")]
    grpo = verl_keys.names("grpo")
    assert "actor_rollout_ref.actor.optim.lr_scheduler" in grpo
    assert not [key for key in grpo if key.startswith("engine.")]


def test_a_verl_ppo_yaml_is_told_grpo():
    assert kind_of({"actor_rollout_ref": {"model": {"path": "m"}}}) == "grpo"
