"""A mistyped choice gets the "did you mean" a mistyped command or option gets: `mfsdp
config defaults sfr` said only "Invalid value for '{sft|grpo}': 'sfr' is not one of 'sft',
'grpo'", under a metavar made of the choices' own punctuation."""

from __future__ import annotations

import click
import pytest

from cli.choice import Choice
from cli.main import app
from tests.support.fresh_python import mfsdp


@pytest.mark.parametrize(
    "args, said",
    [
        (
            ["config", "defaults", "sfr"],
            "Invalid value for 'TRAINER': 'sfr' is not one of 'sft', 'grpo' (did you mean"
            " 'sft'?); see 'mfsdp config defaults --help'",
        ),
        (
            ["config", "defaults", "xyz"],
            "Invalid value for 'TRAINER': 'xyz' is not one of 'sft', 'grpo';"
            " see 'mfsdp config defaults --help'",
        ),
        (
            ["ckpt", "inspect", "x", "--role", "actr"],
            "Invalid value for '--role': 'actr' is not one of 'actor', 'critic' (did you mean"
            " 'actor'?); see 'mfsdp ckpt inspect --help'",
        ),
        (
            ["ckpt", "export-hf", "x", "--out", "y", "--dtype", "bf61"],
            "Invalid value for '--dtype': 'bf61' is not one of 'auto', 'bf16', 'fp16', 'fp32'"
            " (did you mean 'bf16'?); see 'mfsdp ckpt export-hf --help'",
        ),
    ],
)
def test_a_mistyped_choice_names_the_closest(args, said):
    done = mfsdp(*args)
    assert (done.returncode, done.stderr) == (2, f"error: {said}\n")


def _params(command: click.Command, path: str = "mfsdp"):
    for param in command.params:
        yield path, param
    for name, sub in getattr(command, "commands", {}).items():
        yield from _params(sub, f"{path} {name}")


def test_every_choice_of_the_cli_names_the_closest():
    plain = [
        f"{path} {param.name}"
        for path, param in _params(app)
        if isinstance(param.type, click.Choice) and not isinstance(param.type, Choice)
    ]
    assert plain == []
