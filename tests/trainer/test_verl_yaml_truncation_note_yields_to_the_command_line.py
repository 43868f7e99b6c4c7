"""A verl sft_trainer YAML (pad_mode no_padding) loads with `data.truncation: right` and a
note saying so; with `data.truncation=...` on the command line that value won, yet the note
still said right, the opposite of what ran. The command line's truncation is the run's, and
no note is written for the file's."""

from __future__ import annotations

import pytest

from tests.support.paths import REPO
from trainer.config import SFTConfig, load_config

VERL_YAML = REPO / "tests" / "fixtures" / "verl_configs" / "sft_trainer_engine.printed.yaml"
NOTE = "note: data.truncation=right"


def loaded(caplog, *overrides: str) -> str:
    with caplog.at_level("WARNING", logger="mfsdp.config"):
        return load_config(SFTConfig, VERL_YAML, list(overrides)).data.truncation


@pytest.mark.parametrize("override", ["data.truncation=left", "+data.truncation=error"])
def test_the_command_lines_truncation_runs_without_the_files_note(caplog, override):
    assert loaded(caplog, override) == override.partition("=")[2]
    assert NOTE not in caplog.text


def test_without_one_the_file_converts_to_right_with_its_note(caplog):
    assert loaded(caplog) == "right"
    assert NOTE in caplog.text
