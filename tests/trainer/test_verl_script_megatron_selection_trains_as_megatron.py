"""A verl script that puts its run on verl's Megatron backend only through Hydra's group
selections (`model_engine=megatron`, SFT's `optim=megatron engine=megatron`), with no
Megatron key, trains with Megatron's Adam betas 0.9/0.999 (verl never passes
`optim.betas` to Megatron's optimizer): the selections were stripped before any rule read
them, and the script's betas were kept. SFT's two selections are the backend's choice only
(every default of verl's optim/megatron.yaml and engine/megatron.yaml trains as the values
written here do), a note, not a setting left out; and verl's default
`use_megatron_fsdp=False` (Megatron's own data parallel, the same updates) is a note that
strategy.name picks the sharding here."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.verl_hydra_files import BACKEND_CHOICE
from trainer.verl_import import convert_verl
from trainer.verl_off_keys import MEGATRON_ADAM

MEGATRONS = [MEGATRON_ADAM["adam_beta1"], MEGATRON_ADAM["adam_beta2"]]
GRPO = "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo model.path=/tmp/m "
SFT = "torchrun -m verl.trainer.sft_trainer data.train_files=/tmp/x.parquet model.path=/tmp/m "
# every default of verl's optim/megatron.yaml (at 1dda039) this conversion reads a key of
OPTIM_MEGATRON_DEFAULTS = (
    "optim.lr=1e-3 optim.lr_warmup_steps_ratio=0.0 optim.weight_decay=0.01"
    " optim.lr_warmup_steps=-1 optim.clip_grad=1.0 optim.lr_warmup_init=0.0"
    " optim.lr_decay_style=constant optim.min_lr=0.0 optim.weight_decay_incr_style=constant"
    " optim.override_optimizer_config={}"
)


def converted(tmp_path: Path, line: str):
    script = tmp_path / "run.sh"
    script.write_text(line + "\n")
    return convert_verl(script)


@pytest.mark.parametrize(
    "command, selections, betas_key",
    [
        (GRPO, "model_engine=megatron", "actor_rollout_ref.actor.optim.betas"),
        (SFT, "optim=megatron engine=megatron", "optim.betas"),
    ],
)
def test_betas_under_a_megatron_selection_only_are_megatrons(
    tmp_path, command, selections, betas_key
):
    done = converted(tmp_path, f'{command}{selections} "{betas_key}=[0.9,0.95]"')

    assert done.tree["optim"]["betas"] == MEGATRONS
    assert any(
        note.startswith(f"verl's {betas_key}=[0.9, 0.95] is not read by verl's Megatron backend")
        for note in done.notes
    ), done.notes


def test_sfts_megatron_selections_are_the_backends_choice(tmp_path):
    done = converted(tmp_path, SFT + "optim=megatron engine=megatron")

    assert done.dropped == []
    assert f"optim=megatron, engine=megatron: {BACKEND_CHOICE}" in done.notes


def test_sfts_megatron_defaults_train_as_its_fsdp_defaults_here(tmp_path):
    fsdp = converted(tmp_path, SFT)
    megatron = converted(
        tmp_path, SFT + "optim=megatron engine=megatron " + OPTIM_MEGATRON_DEFAULTS
    )

    assert megatron.dropped == []
    for key, value in fsdp.tree["optim"].items():
        assert megatron.tree["optim"][key] == value, key


@pytest.mark.parametrize("selection", ["optim=megatron", "engine=megatron"])
def test_one_megatron_selection_without_the_other_is_refused(tmp_path, selection):
    done = converted(tmp_path, SFT + selection)
    assert [item.split(": ", 1)[0] for item in done.dropped] == [selection]


def test_a_selection_of_another_files_defaults_is_still_refused(tmp_path):
    done = converted(tmp_path, GRPO + "critic@critic=megatron_critic")
    assert [item.split(": ", 1)[0] for item in done.dropped] == ["critic@critic=megatron_critic"]


@pytest.mark.parametrize(
    "command, key",
    [
        (GRPO, "actor_rollout_ref.actor.megatron.use_megatron_fsdp"),
        (SFT + "engine=megatron optim=megatron ", "engine.use_megatron_fsdp"),
    ],
)
def test_megatrons_own_data_parallel_is_a_note(tmp_path, command, key):
    done = converted(tmp_path, f"{command}{key}=False")

    assert done.dropped == []
    assert "strategy" not in done.tree
    assert any(note.startswith(f"verl's {key} is ignored: ") for note in done.notes), done.notes
