"""`mfsdp config from-verl` takes a variable's value from the environment only into keys that
name a file or directory: `trainer.project_name=$GITHUB_TOKEN` wrote the token into the
config (a file people share) and from there to every tracker the run logs to."""

from __future__ import annotations

import pytest

from trainer.verl_import import convert_verl

SECRET = "ghp_not_to_be_shared"


@pytest.fixture
def environment(monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", SECRET)
    monkeypatch.setenv("MODELS", "/models")
    monkeypatch.setenv("HOME", "/home/someone")


def test_a_variable_in_a_value_that_is_no_path_stays_as_written(tmp_path, environment):
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo trainer.project_name=$GITHUB_TOKEN"
        " trainer.experiment_name=run_${GITHUB_TOKEN}_1"
        " actor_rollout_ref.model.path=$MODELS/qwen data.train_files=$HOME/d/train.parquet"
        " trainer.default_local_dir=$HOME/runs/x trainer.total_epochs=1\n"
    )
    conversion = convert_verl(script)
    assert SECRET not in conversion.to_yaml(str(script))
    assert conversion.tree["trainer"]["project_name"] == "$GITHUB_TOKEN"
    assert conversion.tree["trainer"]["experiment_name"] == "run_${GITHUB_TOKEN}_1"
    assert conversion.tree["model"]["path"] == "/models/qwen"
    assert conversion.tree["data"]["train_files"] == ["/home/someone/d/train.parquet"]
    assert conversion.tree["trainer"]["run_dir"] == "/home/someone/runs/x"
    withheld = (
        "$GITHUB_TOKEN: not taken from this environment, where only path keys take a variable's"
        " value (a config is shared, and its values reach the trackers): write the value here"
    )
    assert f"trainer.project_name=$GITHUB_TOKEN: {withheld}" in conversion.notes
    assert f"trainer.experiment_name=run_${{GITHUB_TOKEN}}_1: {withheld}" in conversion.notes
    taken = [note for note in conversion.notes if "taken from this environment, as" in note]
    assert sorted(taken) == [
        "$HOME: taken from this environment, as the shell running the script here would",
        "$MODELS: taken from this environment, as the shell running the script here would",
    ]


def test_a_number_from_the_environment_is_not_carried_over(tmp_path, monkeypatch):
    monkeypatch.setenv("EPOCHS", "3")
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo"
        " trainer.total_epochs=$EPOCHS\n"
    )
    conversion = convert_verl(script)
    assert "epochs" not in conversion.tree["trainer"]  # nor verl's default: the script sets it
    assert [item.split(":")[0] for item in conversion.dropped] == ["trainer.epochs=$EPOCHS"]
