"""A date or time in a config is the text written, as Hydra (OmegaConf) reads it: a run
named `trainer.project_name: 2024-01-01` was refused ("expects a string, got
datetime.date(2024, 1, 1)"), in a file and in a `key=value` override alike; a key that
takes no text still refuses it, in one line."""

from __future__ import annotations

import pytest

from trainer.config import ConfigError, SFTConfig, load_config

WRITTEN = ["2024-01-01", "2024-1-1 9:05:00", "2024-01-01 10:30:00", "2024-01-01T10:30:00.5Z"]


@pytest.mark.parametrize("text", WRITTEN)
def test_a_date_in_a_file_is_its_text(tmp_path, text):
    config = tmp_path / "c.yaml"
    config.write_text(f"trainer:\n  project_name: {text}\n")
    assert load_config(SFTConfig, config).trainer.project_name == text


@pytest.mark.parametrize("text", WRITTEN)
def test_a_date_in_an_override_is_its_text(text):
    cfg = load_config(SFTConfig, None, [f"trainer.project_name={text}"])
    assert cfg.trainer.project_name == text


def test_a_key_taking_no_text_refuses_a_date_in_one_line():
    with pytest.raises(ConfigError) as caught:
        load_config(SFTConfig, None, ["trainer.seed=2024-01-01"])
    assert str(caught.value) == (
        "command-line override: config key 'trainer.seed' expects an integer, got 2024-01-01"
    )
