"""An option that takes one value is given once: `--config` twice was refused while every
other option kept its last value silently (`export-hf --out hf/r1 --out hf/r2` wrote hf/r2
alone, `--hf-config A --hf-config B` checked against B). Flags, `-v` and the options that
take many values are left as they are. Each command is made to refuse so by its group
(`given_once`). Overrides stay ordered, as Hydra orders them."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from cli.given_once import OnceCommand
from cli.main import app
from tests.support.cli_errors import usage_error_line
from tests.support.fresh_python import mfsdp
from tests.support.paths import REPO
from trainer.config import ConfigError, SFTConfig, load_config

CONFIG = str(REPO / "examples" / "sft_tiny_cpu.yaml")


def _commands(group: click.Group) -> list[click.Command]:
    found: list[click.Command] = []
    for command in group.commands.values():
        found += _commands(command) if isinstance(command, click.Group) else [command]
    return found


def test_every_command_refuses_an_option_given_twice():
    commands = _commands(app)
    assert len(commands) >= 10
    assert [c.name for c in commands if not isinstance(c, OnceCommand)] == []


@pytest.mark.parametrize(
    ("args", "option", "values"),
    [
        (["ckpt", "export-hf", "runs/x", "--out", "hf/r1", "--out=hf/r2"], "--out", "hf/r1, hf/r2"),
        (["ckpt", "validate", "x", "--hf-config", "A", "--hf-config", "B"], "--hf-config", "A, B"),
        (
            ["ckpt", "import-hf", "m", "--out", "i", "--layout", "hf", "--layout", "mcore"],
            "--layout",
            "hf, mcore",
        ),
        (
            ["train", "sft", "--config", CONFIG, "--nproc-per-node", "2", "--nproc-per-node", "3"],
            "--nproc-per-node",
            "2, 3",
        ),
        (["data", "synthetic", "--out", "d", "--seed", "1", "--seed", "1"], "--seed", "1, 1"),
        (["demo", "--steps", "1", "--steps", "2"], "--steps", "1, 2"),
    ],
)
def test_a_single_value_option_given_twice_is_refused_naming_both(
    tmp_path, monkeypatch, capsys, args, option, values
):
    said = usage_error_line(monkeypatch, capsys, *args, cwd=tmp_path)
    assert said.startswith(
        f"error: Invalid value for '{option}': given 2 times ({values}); it takes one value:"
        " give one; see 'mfsdp "
    ), said
    assert list(tmp_path.iterdir()) == []  # refused before anything ran


def test_flags_and_verbosity_may_be_repeated(tmp_path):
    # in a fresh process: `-v` sets this process's logging for every later command
    done = mfsdp("-v", "-v", "ckpt", "validate", str(tmp_path), "--json", "--json")
    assert "given 2 times" not in done.stderr
    assert done.returncode == 2 and "not a checkpoint" in done.stdout


def test_an_override_given_twice_is_ordered_as_hydra_orders_it():
    """Overrides are ordered, the later wins, as Hydra and so verl take them: scripts that
    append "$@" after their own keys rely on it (options, unlike overrides, are one value)."""
    cfg = load_config(SFTConfig, overrides=["optim.lr=1e-5", "trainer.seed=1", "optim.lr=2e-5"])
    assert cfg.optim.lr == 2e-5 and cfg.trainer.seed == 1


def test_spaces_around_a_number_are_taken_as_around_the_key():
    loaded = load_config(SFTConfig, overrides=["trainer.total_steps= 5", " optim.lr =2e-5"])
    assert (loaded.trainer.total_steps, loaded.optim.lr) == (5, 2e-5)
    with pytest.raises(ConfigError, match=r"trainer.run_dir: the value has spaces at its start"):
        load_config(SFTConfig, overrides=["trainer.run_dir= runs/x"])  # text: they would count


@pytest.mark.parametrize(
    ("args", "here"),
    [
        (["ckpt", "validate", ""], True),
        (["ckpt", "export-hf", "", "--out", "x"], True),
        (["data", "synthetic", "--out", ""], True),
        (["ckpt", "export-hf", "x", "--out", ""], False),
        (["ckpt", "import-hf", "x", "--out", ""], False),
        (["demo", "--out", ""], False),
        (["train", "sft", "--config", ""], False),
        (["config", "from-verl", ""], False),
        (["data", "gsm8k", "--input", "", "--out", "d"], False),
    ],
)
def test_an_empty_path_is_offered_the_current_dir_only_where_it_is_taken(args, here):
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 2
    assert "is empty (an unset shell variable?); give a path" in done.stderr
    assert ("or . for the current directory" in done.stderr) is here, done.stderr
