"""`mfsdp config from-verl` exits 1 whenever the config it prints lacks something of the verl
run or still needs editing, and its comments say the same: the repository's own
examples/verl/run_grpo_megatron_fsdp.sh exited 0 under a comment saying the settings of its
`--config-name ppo_megatron_trainer.yaml` "are not in this config". verl's own config files
hold verl's defaults (written where mfsdp's differ, `trainer.verl_defaults`); a file of the
user's is named, and the exit is 1, and verl's defaults are not written, as that file may set
any key."""

from __future__ import annotations

import pytest

from tests.support.fresh_python import mfsdp
from tests.support.paths import REPO
from trainer.verl_import import convert_verl

COMMAND = "python3 -m verl.trainer.main_ppo {options} actor_rollout_ref.rollout.n=4\n"


def test_the_repositorys_example_exits_as_its_comments_say():
    done = mfsdp(
        "config", "from-verl", str(REPO / "examples" / "verl" / "run_grpo_megatron_fsdp.sh")
    )
    assert done.returncode == 0, done.stderr
    note = next(line for line in done.stdout.splitlines() if "--config-name" in line)
    assert "ppo_megatron_trainer.yaml: verl's own config" in note
    assert "not in this config" not in note


@pytest.mark.parametrize(
    "options, own",
    [
        ("", False),
        ("--config-path=config --config-name='ppo_megatron_trainer'", False),
        ("--config-path=./config --config-name ppo_trainer.yaml", False),
        ("--config-name=ppo_trainer", False),
        ('--config-path="$CONFIG_PATH" --config-name=gsm8k_multiturn_grpo', True),
        ("--config-path=config --config-name=my_grpo", True),
        ("-cp /home/me/cfg -cn ppo_trainer", True),
    ],
)
def test_a_config_file_of_the_users_is_named_and_fails(options, own, tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(COMMAND.format(options=options))
    conversion = convert_verl(script)
    assert bool(conversion.incomplete) is own
    assert conversion.tree["rollout"] == {"n": 4}
    assert ("use_kl_loss" in conversion.tree.get("actor", {})) is not own


def test_the_exit_and_the_last_line_name_it(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(COMMAND.format(options="--config-path=cfg --config-name=my_grpo"))
    done = mfsdp("config", "from-verl", str(script))
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "error: from-verl: still to edit or add: --config-path cfg, --config-name my_grpo"
        " (listed at the top)"
    )


@pytest.mark.parametrize(
    "defaults, own",
    [
        ("[{optim: fsdp}, _self_]", []),
        ("[ppo_trainer, _self_]", []),
        ("[{actor@actor_rollout_ref.actor: dp_actor}, reward_manager@reward_manager]", []),
        ("[my_base, _self_]", ["defaults: my_base"]),
        ("[{optim: my_optim}]", ["defaults: optim: my_optim"]),
    ],
)
def test_a_yaml_defaults_list_of_the_users_files_fails(defaults, own, tmp_path):
    config = tmp_path / "grpo.yaml"
    config.write_text(f"defaults: {defaults}\nactor_rollout_ref:\n  rollout:\n    n: 4\n")
    conversion = convert_verl(config)
    assert conversion.incomplete == own
    assert conversion.tree["rollout"] == {"n": 4}
    assert ("use_kl_loss" in conversion.tree.get("actor", {})) is not bool(own)
