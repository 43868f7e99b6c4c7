"""A config file's values as its kind of file means them, and a text key's override as typed.

A verl YAML config is read alike by `mfsdp train sft|grpo --config FILE` and by
`mfsdp config from-verl FILE`: as OmegaConf reads it for verl (`1e3` a float, `012` 10,
`1:30` 90), its run's names as the text verl names the run by (`1000.0`). Read by mfsdp's
rules, one file named its run `1e3` in training and `1000.0` converted, and a number
OmegaConf reads (`012`) was refused in training only. mfsdp's own files keep mfsdp's rules.

A text key's override that YAML 1.1's integer pattern matches and int() does not read
(`0x_`, `-0b__`) is the text typed, as before the digit bound: it was refused as "not a
valid !!int", quoting int()'s error; the bound on its digits still holds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.config import ConfigError, SFTConfig, config_from_tree, load_config
from trainer.grpo.config import GRPOConfig
from trainer.verl_import import convert_verl

GRPO_VERL = "algorithm:\n  adv_estimator: grpo\nactor_rollout_ref:\n  model:\n    path: /m/x\n"
SFT_VERL = "model:\n  partial_pretrain: /m/x\ndata:\n  train_files: /d/t.parquet\n"
CASES = {"grpo": (GRPOConfig, GRPO_VERL), "sft": (SFTConfig, SFT_VERL)}


def _both_readings(tmp_path: Path, command: str, trainer_keys: str) -> tuple[object, object]:
    """The config `mfsdp train <command> --config FILE` runs, and the one `mfsdp config
    from-verl FILE` writes, for a verl YAML of `trainer_keys` (`trainer:` lines)."""
    cls, head = CASES[command]
    source = tmp_path / "run.yaml"
    source.write_text(f"{head}trainer:\n{trainer_keys}")
    trained = load_config(cls, source)
    converted = config_from_tree(cls, convert_verl(source, command).tree, str(source))
    return trained, converted


@pytest.mark.parametrize("command", CASES)
@pytest.mark.parametrize(
    ("written", "verl_names_it"),
    [
        ("1e3", "1000.0"),
        ("+1e3", "1000.0"),
        ("1.5e3", "1500.0"),
        ("1_0e2", "1000.0"),
        ("012", "10"),
        ("1:30", "90"),
        ("1:30.5", "90.5"),
        ("42", "42"),
        ("true", "True"),
        (".5", "0.5"),
    ],
)
def test_a_verl_yamls_run_name_is_verls_in_training_and_converted(
    tmp_path, command, written, verl_names_it
):
    trained, converted = _both_readings(
        tmp_path, command, f"  experiment_name: {written}\n  project_name: {written}\n"
    )
    for config in (trained, converted):
        assert config.trainer.experiment_name == verl_names_it  # type: ignore[attr-defined]
        assert config.trainer.project_name == verl_names_it  # type: ignore[attr-defined]


@pytest.mark.parametrize("command", CASES)
@pytest.mark.parametrize(("written", "verl_gets"), [("012", 10), ("1:30", 90), ("0x1f", 31)])
def test_a_verl_yamls_number_is_omegaconfs_in_training_and_converted(
    tmp_path, command, written, verl_gets
):
    trained, converted = _both_readings(
        tmp_path, command, f"  total_epochs: {written}\n  save_freq: {written}\n"
    )
    for config in (trained, converted):
        assert config.trainer.epochs == verl_gets  # type: ignore[attr-defined]
        assert config.checkpoint.save_every == verl_gets  # type: ignore[attr-defined]


def test_a_verl_yamls_mfsdp_keys_are_read_as_verl_reads_the_file(tmp_path):
    """mfsdp's keys beside verl's in one file are read by the file's reading: a seed of
    `012` is 10, as the conversion keeps it."""
    trained, converted = _both_readings(tmp_path, "grpo", "  seed: 012\n")
    assert trained.trainer.seed == converted.trainer.seed == 10  # type: ignore[attr-defined]


def test_a_verl_yaml_verl_cannot_read_is_refused_naming_the_file(tmp_path):
    """`._` is a float to OmegaConf's pattern that float() cannot make: verl does not start."""
    source = tmp_path / "run.yaml"
    source.write_text(f"{GRPO_VERL}trainer:\n  experiment_name: ._\n")
    with pytest.raises(ConfigError, match=r"run\.yaml: '\._' at line 7 is not a valid !!float"):
        load_config(GRPOConfig, source)


@pytest.mark.parametrize("cls", [SFTConfig, GRPOConfig])
def test_mfsdps_own_file_keeps_mfsdps_rules(tmp_path, cls):
    source = tmp_path / "config.yaml"
    source.write_text("trainer:\n  experiment_name: 1e3\n  project_name: ._\n")
    config = load_config(cls, source)
    assert (config.trainer.experiment_name, config.trainer.project_name) == ("1e3", "._")
    source.write_text("trainer:\n  experiment_name: 1e3\n  seed: 012\n")
    with pytest.raises(ConfigError, match=r"only in YAML 1\.1's octal or base-60 forms"):
        load_config(cls, source)
    source.write_text("trainer:\n  experiment_name: 42\n")
    with pytest.raises(ConfigError, match="quote the text to keep it as written"):
        load_config(cls, source)


def test_a_file_verl_does_not_read_either_keeps_mfsdps_error(tmp_path):
    source = tmp_path / "config.yaml"
    source.write_text("trainer:\n  seed: 012\n  lr: [1\n")
    with pytest.raises(ConfigError) as caught:
        load_config(SFTConfig, source)
    assert str(caught.value).startswith(f"{source}: not valid YAML at line 3")


WORDS = ["0x_", "0b_", "-0x_", "+0b_", "0b__", "0x__", "-0b_"]
TEXT_KEYS = ["trainer.project_name", "trainer.experiment_name", "trainer.run_dir"]


@pytest.mark.parametrize("word", WORDS)
@pytest.mark.parametrize("key", TEXT_KEYS)
def test_a_text_key_takes_a_word_int_cannot_read_as_typed(key, word):
    config = load_config(SFTConfig, None, [f"{key}={word}"])
    section, name = key.split(".")
    assert getattr(getattr(config, section), name) == word


@pytest.mark.parametrize("word", WORDS)
def test_a_list_of_text_and_verls_name_of_a_text_key_take_it_as_typed(word):
    config = load_config(
        SFTConfig, None, [f"data.val_files=[{word}]", f"trainer.default_local_dir={word}"]
    )
    assert (config.data.val_files, config.trainer.run_dir) == ([word], word)


@pytest.mark.parametrize("word", ["0x" + "f" * 5000, "-0b" + "1" * 4301, "1" + ":59" * 3000])
def test_a_text_keys_integer_of_too_many_digits_is_still_refused(word):
    with pytest.raises(ConfigError) as caught:
        load_config(SFTConfig, None, [f"trainer.project_name={word}"])
    said = str(caught.value)
    assert said.startswith("override trainer.project_name: integer at line 1 has ")
    assert said.endswith(" digits; refusing") and len(said) < 200


def test_a_text_keys_integer_at_the_digit_cap_is_its_text():
    word = "0x" + "f" * 4300
    assert load_config(SFTConfig, None, [f"trainer.project_name={word}"]).trainer.project_name == (
        word
    )
