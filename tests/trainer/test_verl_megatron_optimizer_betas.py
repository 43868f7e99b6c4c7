"""Adam's betas and eps of a verl run on its Megatron backend, converted as verl applies them.

verl's Megatron optimizer (verl/utils/megatron/optimizer.py `init_megatron_optim_config`)
builds Megatron's OptimizerConfig from optimizer, lr, min_lr, clip_grad, weight_decay and
`override_optimizer_config` only: `optim.betas` is never read, and the run trains with
Megatron's adam_beta1 0.9, adam_beta2 0.999, adam_eps 1e-8 unless the overrides set them.
`optim.betas=[0.9,0.95]` was carried over as it stood (verl trained 0.999, mfsdp 0.95, with
nothing said), and verl's own way to set them, `override_optimizer_config: {adam_beta2: ..}`,
was refused. verl's FSDP backend passes `optim.betas` to AdamW, and keeps them.
"""

from __future__ import annotations

import logging

import pytest
import yaml

from tests.trainer.test_verl_megatron_config_dump import megatron_fsdp_run, section, written
from trainer.config import ConfigError, SFTConfig, load_config
from trainer.grpo.config import GRPOConfig
from trainer.verl_import import convert_verl
from trainer.verl_off_keys import MEGATRON_ADAM

ACTOR = "actor_rollout_ref.actor."
OPTIM = ACTOR + "optim."
MEGATRON_BETAS = [MEGATRON_ADAM["adam_beta1"], MEGATRON_ADAM["adam_beta2"]]
MEGATRON_SCRIPT = (
    "python3 -m verl.trainer.main_ppo --config-path=config"
    " --config-name=ppo_megatron_trainer.yaml algorithm.adv_estimator=grpo"
    f" {ACTOR}megatron.use_megatron_fsdp=True {{}}\n"
)


def converted_script(tmp_path, *keys: str):
    script = tmp_path / "run.sh"
    script.write_text(MEGATRON_SCRIPT.format(" ".join(keys)))
    return convert_verl(script)


def grpo(*overrides: str) -> GRPOConfig:
    return load_config(GRPOConfig, None, list(overrides))


def test_megatron_script_betas_are_megatrons_with_a_note(tmp_path):
    conversion = converted_script(tmp_path, f"{OPTIM}betas=[0.9,0.95]")
    assert conversion.dropped == []
    assert conversion.tree["optim"]["betas"] == MEGATRON_BETAS
    notes = "\n".join(conversion.notes)
    assert f"{OPTIM}betas=[0.9, 0.95] is not read by verl's Megatron backend" in notes


@pytest.mark.parametrize(
    "keys",
    [
        (
            f"+{OPTIM}override_optimizer_config.adam_beta2=0.95",
            f"+{OPTIM}override_optimizer_config.adam_eps=1e-6",
        ),
        ("'" + OPTIM + "override_optimizer_config={adam_beta2: 0.95, adam_eps: 1e-6}'",),
    ],
)
def test_megatron_overrides_set_betas_and_eps_over_a_given_betas(tmp_path, keys):
    conversion = converted_script(tmp_path, f"{OPTIM}betas=[0.8,0.9]", *keys)
    assert conversion.dropped == []
    optim = conversion.tree["optim"]
    assert (optim["betas"], optim["eps"]) == ([MEGATRON_ADAM["adam_beta1"], 0.95], 1e-6)


def test_printed_megatron_config_trains_with_megatrons_betas(tmp_path):
    run = megatron_fsdp_run()
    section(run, OPTIM[:-1])["betas"] = [0.9, 0.95]
    path = written(tmp_path, run)
    assert convert_verl(path).dropped == []
    cfg = load_config(GRPOConfig, path)  # `train grpo --config` reads the print alike
    assert (cfg.optim.betas, cfg.optim.eps) == (MEGATRON_BETAS, MEGATRON_ADAM["adam_eps"])


def test_printed_megatron_config_overrides_are_the_betas(tmp_path):
    run = megatron_fsdp_run()
    optim = section(run, OPTIM[:-1])
    optim["override_optimizer_config"] = {"adam_beta1": 0.85, "adam_beta2": 0.95}
    cfg = load_config(GRPOConfig, written(tmp_path, run))
    assert cfg.optim.betas == [0.85, 0.95]


def test_megatron_sft_optimizer_section_trains_with_megatrons_betas(tmp_path):
    """verl's SFT trainer on its Megatron engine prints its optim section as
    McoreOptimizerConfig; mfsdp's own SFT default betas are not Megatron's."""
    path = tmp_path / "sft.yaml"
    optim = {
        "_target_": "verl.workers.config.McoreOptimizerConfig",
        "lr": 1e-5,
        "betas": [0.9, 0.95],
        "override_optimizer_config": {},
    }
    path.write_text(yaml.safe_dump({"model": {"partial_pretrain": "m"}, "optim": optim}))
    assert load_config(SFTConfig, path).optim.betas == MEGATRON_BETAS


@pytest.mark.parametrize(
    "overrides",
    [
        {"optimizer_cpu_offload": False, "optimizer_offload_fraction": 0},
        {"use_precision_aware_optimizer": False, "adam_beta2": 0.95},
    ],
)
def test_megatron_overrides_at_megatrons_defaults_are_accepted(overrides):
    cfg = grpo(f"{ACTOR}strategy=megatron", f"{OPTIM}override_optimizer_config={overrides}")
    assert cfg.optim.betas[1] == overrides.get("adam_beta2", MEGATRON_ADAM["adam_beta2"])


@pytest.mark.parametrize(
    "overrides",
    [{"optimizer_cpu_offload": True}, {"clip_grad": 0.5}, {"adam_beta2": 0.95, "lr": 1}],
)
def test_megatron_overrides_that_change_training_are_refused(overrides):
    with pytest.raises(ConfigError, match="Megatron optimizer overrides here are adam_beta1"):
        grpo(f"{ACTOR}strategy=megatron", f"{OPTIM}override_optimizer_config={overrides}")


def test_fsdp_backend_keeps_the_betas_it_passes_to_adamw(caplog):
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"):
        cfg = grpo(f"{ACTOR}strategy=fsdp", f"{OPTIM}betas=[0.9,0.95]")
    assert cfg.optim.betas == [0.9, 0.95]
    assert "Megatron" not in caplog.text


def test_fsdp_backend_still_refuses_optimizer_overrides():
    with pytest.raises(ConfigError, match="optimizer settings here are optim's keys"):
        grpo(f"{OPTIM}override_optimizer_config={{adam_beta2: 0.95}}")


@pytest.mark.parametrize(
    "defaults",
    [["ppo_megatron_trainer", "_self_"], [{"actor@actor_rollout_ref.actor": "megatron_actor"}]],
)
def test_yaml_merging_verls_megatron_files_trains_with_megatrons_betas(tmp_path, defaults):
    """The Megatron backend named only by the files the YAML's `defaults:` list merges in."""
    path = tmp_path / "run.yaml"
    run = {
        "defaults": defaults,
        "algorithm": {"adv_estimator": "grpo"},
        "actor_rollout_ref": {"actor": {"optim": {"betas": [0.9, 0.95]}}},
    }
    path.write_text(yaml.safe_dump(run, sort_keys=False))
    assert convert_verl(path).tree["optim"]["betas"] == MEGATRON_BETAS


def test_mfsdps_own_betas_beside_a_megatron_setting_are_kept():
    """`optim.betas` in mfsdp's own naming is the user's setting: beside a verl key that
    names the Megatron backend it was replaced by Megatron's betas, with a note calling it
    verl's."""
    from trainer.config import load_config
    from trainer.grpo.config import GRPOConfig

    cfg = load_config(
        GRPOConfig,
        None,
        ["actor_rollout_ref.actor.strategy=megatron", "optim.betas=[0.8,0.9]"],
    )
    assert list(cfg.optim.betas) == [0.8, 0.9]


def test_megatron_optimizer_overrides_given_one_by_one_are_noted_once(tmp_path):
    """verl's Megatron examples give `+...override_optimizer_config.adam_beta1=...` field by
    field: the note of what they make here was said once per field."""
    from trainer.verl_import import convert_verl

    fields = "".join(
        f" +actor_rollout_ref.actor.optim.override_optimizer_config.{name}={value}"
        for name, value in (("adam_beta1", 0.9), ("adam_beta2", 0.95), ("adam_eps", 1e-8))
    )
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo"
        f" actor_rollout_ref.actor.strategy=megatron{fields}\n"
    )
    conversion = convert_verl(script)
    notes = [note for note in conversion.notes if "override_optimizer_config" in note]
    assert len(notes) == 1 and "optim.betas=[0.9, 0.95]" in notes[0], notes
