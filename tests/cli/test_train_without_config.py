"""`mfsdp train sft` with no --config (alone, or with a few overrides) says that no --config
was given and how to start one: it named only data.train_files ("no training files given"),
as if one key of a config were missing."""

import pytest
from click.testing import CliRunner

from cli.main import app


@pytest.mark.parametrize("command", ["sft", "grpo"])
@pytest.mark.parametrize("overrides", [[], ["trainer.total_steps=2", "optim.lr=1e-4"]])
def test_no_config_and_no_training_files_says_no_config_was_given(command, overrides):
    done = CliRunner().invoke(app, ["train", command, *overrides])
    assert done.exit_code == 2, done.output
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: no --config given, and data.train_files is not set")
    assert f"`mfsdp config defaults {command} > {command}.yaml`" in done.stderr
    assert f"--config {command}.yaml" in done.stderr


def test_a_config_without_training_files_still_names_the_key(tmp_path):
    config = tmp_path / "sft.yaml"
    config.write_text("trainer:\n  total_steps: 2\n")
    done = CliRunner().invoke(app, ["train", "sft", "--config", str(config)])
    assert done.exit_code == 2 and "data.train_files: no training files given" in done.stderr


def test_help_says_what_config_is_for_and_how_to_start_one():
    shown = " ".join(CliRunner().invoke(app, ["train", "sft", "--help"]).stdout.split())
    assert "--config FILE The run's settings: a YAML file" in shown, shown
    assert "`mfsdp config defaults sft > sft.yaml`" in shown
