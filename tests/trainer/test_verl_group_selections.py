"""Hydra config-group selections on a verl command line (`optim=fsdp`,
`actor@actor_rollout_ref.actor=dp_actor`) were refused as config sections given a string,
and the whole conversion stopped (exit 2). One that selects the file verl's trainer config
already selects changes nothing and is named in a note; another is not carried over, named
with why. The defaults lists are verl's (verl/trainer/config/ppo_trainer.yaml,
ppo_megatron_trainer.yaml, sft_trainer.yaml, sft_trainer_engine.yaml `defaults:`), loaded
by each module's `hydra.main(config_name=...)` (verl/trainer/main_ppo.py `main`,
fsdp_sft_trainer.py `main`, sft_trainer.py `main`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.verl_import import Conversion, convert_verl

PPO = (
    "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo"
    " data.train_files=/d/train.parquet actor_rollout_ref.model.path=/m "
)
SFT_ENGINE = "torchrun -m verl.trainer.sft_trainer data.train_files=/d/t.parquet model.path=/m "
SFT = "torchrun -m verl.trainer.fsdp_sft_trainer data.train_files=/d/t.parquet model.path=/m "


def converted(tmp_path: Path, text: str) -> Conversion:
    script = tmp_path / "run.sh"
    script.write_text(text + "\n")
    return convert_verl(script)


@pytest.mark.parametrize(
    "command, selections, config",
    [
        (
            PPO,
            "actor@actor_rollout_ref.actor=dp_actor critic=dp_critic data=legacy_data",
            "ppo_trainer",
        ),
        (
            PPO + "--config-name ppo_megatron_trainer ",
            "actor@actor_rollout_ref.actor=megatron_actor",
            "ppo_megatron_trainer",
        ),
        (
            SFT_ENGINE,
            "optim=fsdp engine=fsdp model=hf_model +profiler=profiler",
            "sft_trainer_engine",
        ),
        (SFT, "optim=fsdp", "sft_trainer"),
    ],
)
def test_a_selection_verl_makes_anyway_is_a_note(tmp_path, command, selections, config):
    plain = converted(tmp_path, command)
    conversion = converted(tmp_path, command + selections)

    assert conversion.dropped == plain.dropped
    assert conversion.tree == plain.tree
    shown = selections.replace(" ", ", ")
    assert f"{shown}: the file verl's {config} config selects anyway" in conversion.notes


@pytest.mark.parametrize(
    "command, selection, why",
    [
        (SFT_ENGINE, "optim=megatron", "where verl's sft_trainer_engine config selects fsdp"),
        (PPO, "critic@critic=megatron_critic", "where verl's ppo_trainer config selects dp_critic"),
        (PPO, "model=hf_model", "verl's ppo_trainer config selects no model file at model"),
        (SFT, "engine=fsdp", "verl's sft_trainer config selects no engine file at engine"),
        (SFT, "engine=null", "verl's sft_trainer config selects no engine file at engine"),
        (PPO + "--config-path /mine --config-name run ", "optim=fsdp", "a config that is not"),
    ],
)
def test_another_selection_is_not_carried_over_and_says_why(tmp_path, command, selection, why):
    conversion = converted(tmp_path, command + selection)

    refused = [item for item in conversion.dropped if item.startswith(f"{selection}: ")]
    assert len(refused) == 1 and why in refused[0], conversion.dropped
    assert "\n" not in refused[0]
