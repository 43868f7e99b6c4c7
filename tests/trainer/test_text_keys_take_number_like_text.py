"""A key that takes text (a run dir, a name, checkpoint.resume) takes an override YAML reads
as a number or boolean as the text typed: `trainer.run_dir=6` was refused ("expects a
string, got 6") though a dir named 6 is one. In a file, where the text is gone once read,
the refusal says to quote it, and checkpoint.resume names what it takes."""

from __future__ import annotations

import pytest

from trainer.config import ConfigError, SFTConfig, load_config

TEXTS = ["6", "0x1f", "1_000", "1e3", "+6", "true", ".inf"]


@pytest.mark.parametrize("text", TEXTS)
def test_an_override_of_a_text_key_is_the_text_typed(text):
    config = load_config(
        SFTConfig, None, [f"trainer.run_dir={text}", f"trainer.experiment_name={text}"]
    )
    assert (config.trainer.run_dir, config.trainer.experiment_name) == (text, text)


def test_a_resume_override_of_digits_is_a_dir(tmp_path):
    assert load_config(SFTConfig, None, ["checkpoint.resume=6"]).checkpoint.resume == "6"


def test_a_boolean_resume_names_what_resume_takes():
    with pytest.raises(ConfigError) as err:
        load_config(SFTConfig, None, ["checkpoint.resume=true"])
    assert str(err.value) == (
        "command-line override: config key 'checkpoint.resume' expects a string"
        " (auto | disable | PATH), got true, which YAML reads as a boolean: write one of"
        " auto | disable | PATH"
    )


def test_a_number_for_a_text_key_in_a_file_says_to_quote_it(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("trainer:\n  run_dir: 0x1f\n")
    with pytest.raises(ConfigError) as err:
        load_config(SFTConfig, path)
    assert str(err.value) == (
        f"{path}: config key 'trainer.run_dir' expects a string, got 31, which YAML reads as a"
        ' number: quote the text to keep it as written (run_dir: "...")'
    )
