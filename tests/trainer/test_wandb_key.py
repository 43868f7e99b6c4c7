"""Whether wandb will find an API key, read as wandb reads it (without importing wandb):
a run with `trainer.logger=[...,wandb]` and no key failed in every rank once the model was
built, or stopped at wandb's account prompt."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.wandb_key import NO_KEY, wandb_key_problem


@pytest.fixture
def home(tmp_path) -> Path:
    (tmp_path / "home").mkdir()
    (tmp_path / "work").mkdir()
    return tmp_path


def _env(home: Path, **variables: str) -> dict[str, str]:
    return {"HOME": str(home / "home"), "WANDB_DIR": str(home / "work"), **variables}


def test_no_key_anywhere_is_the_one_line(home):
    assert wandb_key_problem(_env(home)) == NO_KEY
    assert NO_KEY == (
        "trainer.logger has wandb but no API key: run `wandb login`, set WANDB_API_KEY, or"
        " WANDB_MODE=offline"
    )


@pytest.mark.parametrize(
    "variables",
    [
        {"WANDB_API_KEY": "x" * 40},
        {"WANDB_MODE": "offline"},
        {"WANDB_MODE": "disabled"},
        {"WANDB_MODE": "dryrun"},
        {"WANDB_IDENTITY_TOKEN_FILE": "/run/token"},
    ],
    ids=lambda variables: next(iter(variables)),
)
def test_a_key_or_a_mode_needing_none_in_the_environment(home, variables):
    assert wandb_key_problem(_env(home, **variables)) is None


def test_an_empty_api_key_is_none(home):
    assert wandb_key_problem(_env(home, WANDB_API_KEY="")) == NO_KEY


def test_the_netrc_entry_of_wandbs_server(home):
    netrc = home / "home" / ".netrc"
    netrc.write_text("machine github.com login me password other\n")
    assert wandb_key_problem(_env(home)) == NO_KEY
    netrc.write_text("machine api.wandb.ai\n  login user\n  password " + "k" * 40 + "\n")
    assert wandb_key_problem(_env(home)) is None


def test_the_netrc_entry_of_a_server_of_ones_own(home):
    netrc = home / "netrc-elsewhere"
    netrc.write_text("machine wandb.example.com login user password " + "k" * 40 + "\n")
    assert wandb_key_problem(_env(home, NETRC=str(netrc))) == NO_KEY
    server = {"NETRC": str(netrc), "WANDB_BASE_URL": "https://wandb.example.com"}
    assert wandb_key_problem(_env(home, **server)) is None


def test_a_netrc_that_does_not_parse_holds_no_key(home):
    (home / "home" / ".netrc").write_text("machine api.wandb.ai login\n")
    assert wandb_key_problem(_env(home)) == NO_KEY


@pytest.mark.parametrize("line", ["api_key = " + "k" * 40, "mode = offline"])
def test_the_settings_files(home, line):
    settings = home / "home" / ".config" / "wandb" / "settings"
    settings.parent.mkdir(parents=True)
    settings.write_text(f"[default]\n{line}\n")
    assert wandb_key_problem(_env(home)) is None
    workspace = home / "work" / "wandb" / "settings"
    workspace.parent.mkdir()
    settings.unlink()
    workspace.write_text(f"[default]\n{line}\n")
    assert wandb_key_problem(_env(home)) is None


def test_the_environments_mode_over_the_settings_files(home):
    settings = home / "home" / ".config" / "wandb" / "settings"
    settings.parent.mkdir(parents=True)
    settings.write_text("[default]\nmode = offline\n")
    assert wandb_key_problem(_env(home, WANDB_MODE="online")) == NO_KEY
