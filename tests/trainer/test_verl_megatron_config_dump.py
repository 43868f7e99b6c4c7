"""verl's Megatron config, as its Megatron-FSDP GRPO run prints it (its
_generated_ppo_megatron_trainer.yaml with `adv_estimator: grpo`, the rollout's tensor
parallel size 1 and `use_megatron_fsdp: true`), converts with no key listed: its Megatron
optimizer keys at the defaults that give the schedule mfsdp's copies, its `megatron.*`
settings at sizes 1, offload off and overrides empty, `model.override_config` at verl's
empty default and its `model.lora.*` while LoRA's rank is 0 are accepted with notes; it
listed 47 keys. Values that mean something mfsdp does not do are still listed, each with
its whole reason (a value holding ': ' cut the reason short), and keys under
`actor_rollout_ref.actor.optim.` keep the whole name and the "ignored when null" rule."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from tests.support.paths import REPO
from trainer.config import ConfigError, SFTConfig, load_config
from trainer.grpo.config import GRPOConfig
from trainer.verl_import import convert_verl
from trainer.verl_off_keys import OFF_KEYS

FIXTURES = REPO / "tests" / "fixtures" / "verl_configs"
MODEL = "actor_rollout_ref.model."


def verls_megatron_file() -> dict[str, Any]:
    """verl's _generated_ppo_megatron_trainer.yaml: the FSDP file's sections with the
    Megatron file's own over them (make_megatron_sections.py)."""
    fsdp = yaml.safe_load((FIXTURES / "_generated_ppo_trainer.yaml").read_text())
    own = yaml.safe_load((FIXTURES / "_generated_ppo_megatron_trainer.sections.yaml").read_text())
    return {name: own.get(name, section) for name, section in fsdp.items()}


def megatron_fsdp_run() -> dict[str, Any]:
    """verl's Megatron file as a Megatron-FSDP GRPO run prints it."""
    run = verls_megatron_file()
    run["algorithm"]["adv_estimator"] = "grpo"
    run["actor_rollout_ref"]["rollout"]["tensor_model_parallel_size"] = 1
    run["actor_rollout_ref"]["actor"]["megatron"]["use_megatron_fsdp"] = True
    return run


def written(tmp_path, tree: dict[str, Any]):
    path = tmp_path / "printed.yaml"
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return path


def section(tree: dict[str, Any], dotted: str) -> dict[str, Any]:
    for part in dotted.split("."):
        tree = tree[part]
    return tree


def test_verls_megatron_fsdp_run_converts_with_no_key_listed(tmp_path):
    path = written(tmp_path, megatron_fsdp_run())
    conversion = convert_verl(path)
    assert (conversion.dropped, conversion.incomplete) == ([], [])
    cfg = load_config(GRPOConfig, path)  # `train grpo --config` reads the print alike
    assert (cfg.strategy.name, cfg.model.lora_rank, cfg.optim.scheduler) == (
        "megatron_fsdp",
        0,
        "constant",
    )
    notes = "\n".join(conversion.notes)
    assert f"{MODEL}lora.type is ignored: LoRA is off" in notes
    assert "actor.optim.lr_warmup_init is ignored: warmup rises from 0" in notes
    assert f"{MODEL}override_config is ignored" in notes


@pytest.mark.parametrize(
    "where, name, value, why",
    [
        ("actor_rollout_ref.actor.megatron", "tensor_model_parallel_size", 2, "sizes are 1"),
        ("actor_rollout_ref.actor.megatron", "virtual_pipeline_model_parallel_size", 2, "are 1"),
        ("actor_rollout_ref.actor.megatron", "param_offload", True, "offload is not supported"),
        ("actor_rollout_ref.actor.megatron", "use_dist_checkpointing", True, "dist checkpoint"),
        ("actor_rollout_ref.actor.megatron", "override_ddp_config", {"bucket_size": 1}, "data-"),
        ("actor_rollout_ref.actor", "load_weight", False, "model.path's weights"),
        ("actor_rollout_ref.actor.optim", "lr_warmup_init", 1e-7, "rises from 0"),
        ("actor_rollout_ref.actor.optim", "lr_decay_steps", 100, "trainer.total_steps"),
        ("actor_rollout_ref.actor.optim", "use_checkpoint_opt_param_scheduler", True, "config"),
        (MODEL + "override_config", "model_config", {"num_hidden_layers": 2}, "config.json"),
        (MODEL + "override_config.moe_config", "freeze_moe_router", True, "config.json"),
        (
            "actor_rollout_ref.actor.megatron.override_transformer_config",
            "num_layers",
            2,
            "config.json",
        ),
    ],
)
def test_a_megatron_value_that_changes_training_is_listed(tmp_path, where, name, value, why):
    run = megatron_fsdp_run()
    section(run, where)[name] = value
    dropped = convert_verl(written(tmp_path, run)).dropped
    assert len(dropped) >= 1 and all(why in item for item in dropped), dropped
    with pytest.raises(ConfigError, match=why):
        load_config(GRPOConfig, written(tmp_path, run))


def test_megatron_lora_settings_are_read_once_lora_is_on(tmp_path):
    """At rank 8 verl trains its fused `lora.type: lora`, which mfsdp does not."""
    run = megatron_fsdp_run()
    section(run, MODEL + "lora")["rank"] = 8
    dropped = convert_verl(written(tmp_path, run)).dropped
    assert any(item.startswith(f"{MODEL}lora.type=lora: ") for item in dropped), dropped
    assert any("canonical_lora" in item for item in dropped), dropped


def test_a_reason_is_listed_whole_when_the_value_holds_a_colon(tmp_path):
    """The reason was split off the message at its second ': ', inside the mapping."""
    override = {"model_config": {"num_hidden_layers": 2}, "moe_config": {}}
    run = {
        "algorithm": {"adv_estimator": "grpo"},
        "actor_rollout_ref": {"model": {"override_config": copy.deepcopy(override)}},
    }
    assert convert_verl(written(tmp_path, run)).dropped == [
        f"{MODEL}override_config={override}: {OFF_KEYS[MODEL + 'override_config'].refused}"
    ]


@pytest.mark.parametrize("suffix", [".yaml", ".sh"])
def test_an_actor_optim_key_not_mapped_is_named_whole(tmp_path, suffix):
    key = "actor_rollout_ref.actor.optim.lrr"
    with pytest.raises(ConfigError, match=f"verl key '{key}' is not one mfsdp maps"):
        load_config(GRPOConfig, None, [f"{key}=1"])
    path = tmp_path / f"run{suffix}"
    path.write_text(
        "algorithm:\n  adv_estimator: grpo\nactor_rollout_ref:\n  actor:\n    optim:\n"
        "      lrr: 1\n"
        if suffix == ".yaml"
        else f"python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo {key}=1\n"
    )
    dropped = convert_verl(path).dropped
    # a script's key verl's struct refuses first: verl does not start
    named = f"verl key '{key}'" if suffix == ".yaml" else "verl refuses it and does not start"
    assert len(dropped) == 1 and dropped[0].startswith(f"{key}=1: {named}"), dropped


def test_an_actor_optim_key_not_mapped_is_ignored_when_null(caplog):
    key = "actor_rollout_ref.actor.optim.lrr"
    cfg = load_config(GRPOConfig, None, [f"{key}=null"])
    assert cfg.optim == GRPOConfig().optim
    assert f"verl's {key} is ignored: null" in caplog.text


SFT_ENGINE_DEFAULTS = """\
checkpoint:
  save_contents: ["model", "optimizer", "extra"]
  load_contents: ${checkpoint.save_contents}
data:
  ignore_input_ids_mismatch: False
trainer:
  profile_interval: [-1, -1]
"""


def test_verls_sft_trainer_checkpoint_section_at_its_defaults_converts(tmp_path):
    """verl's sft_trainer reads a top-level `checkpoint:` (sft_trainer_engine.yaml); its
    fsdp_sft_trainer `trainer.checkpoint` (sft_trainer.yaml), which still works."""
    path = tmp_path / "sft.yaml"
    path.write_text(SFT_ENGINE_DEFAULTS)
    assert convert_verl(path, "sft").dropped == []
    load_config(SFTConfig, path)
    load_config(SFTConfig, None, ["trainer.checkpoint.save_contents=[model,optimizer,extra]"])
    # what verl saves trains nothing; what it loads on a resume does
    load_config(SFTConfig, None, ["checkpoint.save_contents=[model]"])
    with pytest.raises(ConfigError, match="all three"):
        load_config(SFTConfig, None, ["checkpoint.load_contents=[model]"])
    with pytest.raises(ConfigError, match="turn by turn"):
        load_config(SFTConfig, None, ["data.ignore_input_ids_mismatch=true"])


def test_the_reference_models_overrides_follow_the_actors_or_their_empty_default():
    """verl's Megatron file writes the reference model's transformer overrides as
    `${oc.select:actor_rollout_ref.actor.megatron.override_transformer_config,{}}`: an empty
    mapping as the default, which the reference pattern did not read, so the text stayed."""
    from trainer.verl_interpolation import resolve

    default = "${oc.select:actor_rollout_ref.actor.megatron.override_transformer_config,{}}"
    for actors, expected in ((None, {}), ({"num_layers": 2}, {"num_layers": 2})):
        megatron = {} if actors is None else {"override_transformer_config": actors}
        tree = {
            "actor_rollout_ref": {
                "actor": {"megatron": megatron},
                "ref": {"megatron": {"override_transformer_config": default}},
            }
        }
        resolve(tree, 1 << 20)
        assert tree["actor_rollout_ref"]["ref"]["megatron"]["override_transformer_config"] == (
            expected
        )
