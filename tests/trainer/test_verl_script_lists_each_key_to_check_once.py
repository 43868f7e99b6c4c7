"""What `mfsdp config from-verl` lists "still to edit or add" names each setting once, and
only settings that change the run here: the Hydra options naming a config file of the
user's, whose value a variable set in a block gives (verl's gspo/sapo examples), were
listed with that file and again as keys to check; a key ignored at any value here (Ray's
`ray_kwargs.*`, set in an `if` by verl's uv-launched GRPO recipe) was listed as one to
edit, though its note says it is ignored."""

from __future__ import annotations

from pathlib import Path

from trainer.verl_import import convert_verl

LAUNCH = "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo model.path=/tmp/m"


def converted(tmp_path: Path, text: str):
    script = tmp_path / "run.sh"
    script.write_text(text)
    return convert_verl(script)


def test_the_options_naming_the_users_config_are_listed_once(tmp_path):
    done = converted(
        tmp_path,
        "CONFIG_NAME=mine\n"
        'if [ "$BIG" = 1 ]; then CONFIG_NAME=mine_big; fi\n'
        f"{LAUNCH} --config-path ./config --config-name=$CONFIG_NAME\n",
    )

    named = [item for item in done.incomplete if "--config-name" in item]
    assert named == ["--config-path ./config, --config-name mine"], done.incomplete


def test_a_verl_config_named_by_a_variable_in_a_block_is_still_to_check(tmp_path):
    done = converted(
        tmp_path,
        "CONFIG_NAME=ppo_trainer\n"
        'if [ "$BIG" = 1 ]; then CONFIG_NAME=mine; fi\n'
        f"{LAUNCH} --config-name=$CONFIG_NAME\n",
    )

    assert done.incomplete == ["--config-name=ppo_trainer"]


def test_a_key_ignored_at_any_value_is_not_to_edit(tmp_path):
    done = converted(
        tmp_path,
        "RAY=(ray_kwargs.ray_init.runtime_env.py_executable=null)\n"
        "BS=8\n"
        'if [ "$USE_UV" = 1 ]; then\n'
        '    RAY=(ray_kwargs.ray_init.runtime_env.py_executable="uv run python3")\n'
        "    BS=16\n"
        "fi\n"
        f'{LAUNCH} data.train_batch_size=$BS "${{RAY[@]}}"\n',
    )

    assert done.incomplete == ["data.train_batch_size=8"]
    assert any(
        note.startswith("verl's ray_kwargs.ray_init.runtime_env.py_executable is ignored")
        for note in done.notes
    )
