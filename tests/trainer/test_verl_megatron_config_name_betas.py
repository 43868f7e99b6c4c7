"""A verl launch script whose Megatron backend is named only by the trainer config it loads.

verl's examples/*megatron*.sh start `main_ppo --config-name=ppo_megatron_trainer`, whose
actor file sets `strategy: megatron`: the script need not set the strategy or any
`megatron.*` key, and its `optim.betas` is still never read (Megatron's Adam betas train).
Such a script carried its `optim.betas=[0.9,0.95]` over as if verl's FSDP backend ran it.
"""

from __future__ import annotations

import pytest

from tests.trainer.test_verl_megatron_optimizer_betas import MEGATRON_BETAS, OPTIM
from trainer.verl_import import convert_verl

GIVEN_BETAS = f"{OPTIM}betas=[0.9,0.95]"


def converted(tmp_path, hydra_options: str, *keys: str):
    script = tmp_path / "run.sh"
    script.write_text(
        f"python3 -m verl.trainer.main_ppo {hydra_options} algorithm.adv_estimator=grpo"
        f" {' '.join(keys)}\n"
    )
    return convert_verl(script)


@pytest.mark.parametrize(
    "hydra_options",
    [
        "--config-name=ppo_megatron_trainer",
        "--config-name ppo_megatron_trainer",
        "--config-path=config --config-name='ppo_megatron_trainer.yaml'",
        "-cn _generated_ppo_megatron_trainer",
    ],
)
def test_megatron_trainer_config_trains_with_megatrons_betas(tmp_path, hydra_options):
    conversion = converted(tmp_path, hydra_options, GIVEN_BETAS)
    assert conversion.dropped == []
    assert conversion.tree["optim"]["betas"] == MEGATRON_BETAS
    notes = "\n".join(conversion.notes)
    assert f"{OPTIM}betas=[0.9, 0.95] is not read by verl's Megatron backend" in notes


@pytest.mark.parametrize(
    "hydra_options", ["--config-name=ppo_trainer", "--config-path=config --config-name ppo_trainer"]
)
def test_fsdp_trainer_config_keeps_the_given_betas(tmp_path, hydra_options):
    conversion = converted(tmp_path, hydra_options, GIVEN_BETAS)
    assert conversion.tree["optim"]["betas"] == [0.9, 0.95]
    assert "Megatron" not in "\n".join(conversion.notes)


def test_strategy_the_script_sets_wins_over_its_trainer_config(tmp_path):
    """verl merges the command's keys over the loaded config's: an FSDP actor strategy set on
    the command line runs the FSDP workers, which pass optim.betas to AdamW."""
    conversion = converted(
        tmp_path,
        "--config-name=ppo_megatron_trainer",
        "actor_rollout_ref.actor.strategy=fsdp",
        GIVEN_BETAS,
    )
    assert conversion.tree["optim"]["betas"] == [0.9, 0.95]
