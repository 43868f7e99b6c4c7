"""trainer.rollout_data_dir and validation_data_dir are checked at config load, in one line
naming the key (exit 2): a file, a symlink loop, a dangling link or /dev/full there failed
after the model was built and a step trained ("cannot make the directory (File exists)"),
both keys naming one directory let each step's validation file replace its training one, and
a dump dir in a step dir of the run was deleted by that step's save."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cli.main import main
from trainer.config import ConfigError, load_config
from trainer.grpo.config import GRPOConfig
from trainer.grpo.dump_dirs import check_dump_dirs


def trainer_of(tmp_path: Path, **dirs: str):
    overrides = [f"trainer.run_dir={tmp_path / 'run'}"]
    overrides += [f"trainer.{key}={value}" for key, value in dirs.items()]
    return load_config(GRPOConfig, None, overrides).trainer


@pytest.fixture
def odd(tmp_path: Path) -> Path:
    (tmp_path / "afile").write_text("hi")
    (tmp_path / "l1").symlink_to("l2")
    (tmp_path / "l2").symlink_to("l1")
    (tmp_path / "dang").symlink_to("/nonexistent-target")
    return tmp_path


@pytest.mark.parametrize("key", ["rollout_data_dir", "validation_data_dir"])
@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("afile", "is a file, not a directory"),
        ("afile/sub", "is a file, not a directory"),
        ("l1", "is a symlink loop"),
        ("dang", "a symlink to a missing target"),
    ],
)
def test_an_unmakeable_dump_dir_is_refused_naming_its_key(odd, key, name, words):
    with pytest.raises(ConfigError) as refused:
        check_dump_dirs(trainer_of(odd, **{key: str(odd / name)}))
    assert str(refused.value).startswith(f"trainer.{key}: {odd / name}")
    assert words in str(refused.value) and "\n" not in str(refused.value)


def test_dev_full_is_refused():
    trainer = load_config(GRPOConfig, None, ["trainer.rollout_data_dir=/dev/full"]).trainer
    with pytest.raises(ConfigError) as refused:
        check_dump_dirs(trainer)
    assert str(refused.value) == (
        "trainer.rollout_data_dir: /dev/full: /dev/full is a file, not a directory"
    )


def test_a_missing_dir_is_fine_and_not_created(tmp_path):
    check_dump_dirs(trainer_of(tmp_path, rollout_data_dir=str(tmp_path / "a/b")))
    assert not (tmp_path / "a").exists()


def test_one_dir_for_both_is_refused_naming_both_keys(tmp_path):
    (tmp_path / "same").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "same")  # the same dir, spelled otherwise
    trainer = trainer_of(
        tmp_path,
        rollout_data_dir=str(tmp_path / "same"),
        validation_data_dir=str(tmp_path / "link"),
    )
    with pytest.raises(ConfigError) as refused:
        check_dump_dirs(trainer)
    said = str(refused.value)
    assert "trainer.rollout_data_dir" in said and "trainer.validation_data_dir" in said
    assert "one directory" in said and "\n" not in said


@pytest.mark.parametrize("inside", ["global_step_1", "global_step_3/dumps", "global_step_12"])
def test_a_dir_in_a_step_dir_of_the_run_is_refused(tmp_path, inside):
    trainer = trainer_of(tmp_path, rollout_data_dir=str(tmp_path / "run" / inside))
    with pytest.raises(ConfigError) as refused:
        check_dump_dirs(trainer)
    step = inside.split("/")[0]
    assert str(refused.value).startswith("trainer.rollout_data_dir: ")
    assert f"inside the checkpoint {tmp_path / 'run' / step}" in str(refused.value)


@pytest.mark.parametrize("where", ["run", "run/generations", "elsewhere"])
def test_the_run_dir_and_its_other_dirs_are_fine(tmp_path, where):
    (tmp_path / "run" / "global_step_1").mkdir(parents=True)
    check_dump_dirs(trainer_of(tmp_path, rollout_data_dir=str(tmp_path / where)))


def test_the_command_refuses_before_the_model_is_built(odd, monkeypatch, capsys):
    monkeypatch.chdir(odd)
    argv = ["mfsdp", "train", "grpo", "model.shape=tiny", "trainer.run_dir=run"]
    monkeypatch.setattr(sys, "argv", [*argv, f"trainer.rollout_data_dir={odd / 'afile'}"])
    with pytest.raises(SystemExit) as done:
        main()
    err = capsys.readouterr().err
    assert done.value.code == 2
    assert err.count("\n") == 1 and f"trainer.rollout_data_dir: {odd / 'afile'}" in err
    assert not (odd / "run").exists()
