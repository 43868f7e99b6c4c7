"""What a verl user brings besides a launch script: wandb's run config (each section
wrapped as `{value: ...}`, with wandb's `_wandb`) converts as the config it holds; Hydra's
`.hydra/overrides.yaml` (a list of overrides) is refused in one line naming what to convert
instead; and a script that runs verl's trainer as its file (`python3
verl/trainer/main_ppo.py ...`) is the same run as `-m verl.trainer.main_ppo`. Were: 292
keys listed under `value.` sections with verl's defaults written for the run's settings;
"top level must be a mapping"; "no `python3 -m verl.trainer.main_ppo ...` command found"."""

from __future__ import annotations

import pytest
import yaml

from trainer.verl_import import VerlSourceError, convert_verl

RUN = {
    "algorithm": {"adv_estimator": "grpo"},
    "data": {"train_files": "/d/t.parquet", "train_batch_size": 64},
    "actor_rollout_ref": {
        "model": {"path": "/m/q"},
        "actor": {"optim": {"lr": 2e-6}, "use_kl_loss": True},
        "rollout": {"n": 4},
    },
    "trainer": {"total_epochs": 2},
}


def test_a_wandb_run_config_converts_as_the_config_it_holds(tmp_path):
    wrapped = {"wandb_version": 1, "_wandb": {"desc": None, "value": {"cli_version": "0.19.1"}}}
    wrapped |= {section: {"desc": None, "value": keys} for section, keys in RUN.items()}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(wrapped))
    (tmp_path / "plain.yaml").write_text(yaml.safe_dump(RUN))
    read, plain = convert_verl(tmp_path / "config.yaml"), convert_verl(tmp_path / "plain.yaml")
    assert read.dropped == plain.dropped == []
    assert read.tree == plain.tree
    assert read.tree["optim"]["lr"] == 2e-6


def test_hydras_overrides_list_is_refused_naming_what_to_convert(tmp_path):
    source = tmp_path / "overrides.yaml"
    source.write_text("- algorithm.adv_estimator=grpo\n- data.train_batch_size=64\n")
    with pytest.raises(VerlSourceError) as err:
        convert_verl(source)
    assert str(err.value) == (
        f"{source}: a list of Hydra overrides (a run's .hydra/overrides.yaml), not a config:"
        " convert the run's launch script, or the config it composed, the .hydra/config.yaml"
        " beside it"
    )


ARGS = (
    "algorithm.adv_estimator=grpo data.train_files=/d/t.parquet actor_rollout_ref.model.path=/m/q"
    " actor_rollout_ref.actor.optim.lr=2e-6"
)
SFT_ARGS = "data.train_files=/d/t.parquet model.path=/m/q optim.lr=1e-5"


@pytest.mark.parametrize(
    ("as_file", "as_module"),
    [
        (f"python3 verl/trainer/main_ppo.py {ARGS}", f"python3 -m verl.trainer.main_ppo {ARGS}"),
        (
            f"python3 $HOME/verl/verl/trainer/main_ppo.py {ARGS}",
            f"python3 -m verl.trainer.main_ppo {ARGS}",
        ),
        (
            f"torchrun --nproc_per_node=2 verl/trainer/sft_trainer.py {SFT_ARGS}",
            f"torchrun --nproc_per_node=2 -m verl.trainer.sft_trainer {SFT_ARGS}",
        ),
    ],
)
def test_the_trainer_run_as_its_file_is_the_modules_run(tmp_path, as_file, as_module):
    (tmp_path / "file.sh").write_text(as_file + "\n")
    (tmp_path / "module.sh").write_text(as_module + "\n")
    read, named = convert_verl(tmp_path / "file.sh"), convert_verl(tmp_path / "module.sh")
    assert (read.tree, read.dropped, read.flags) == (named.tree, named.dropped, named.flags)
