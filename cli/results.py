"""The flags `ckpt export-hf` and `ckpt import-hf` share, and how both print what they did, so
the two read alike."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import click

from cli.json_text import json_text
from cli.lines import say


def overwrite_option(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--overwrite` (`help`: what this command replaces): one name and one parameter for
    both converters, whose library functions take it as `overwrite=`."""
    return click.option("--overwrite", is_flag=True, help=help)


def allow_nonfinite_option(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--allow-nonfinite` (`help`: what this command does with NaN/Inf instead of failing):
    one name and one parameter for both converters, whose library functions take it as
    `allow_nonfinite=`."""
    return click.option("--allow-nonfinite", is_flag=True, help=help)


def echo_result(result: Any, as_json: bool, derived: tuple[str, ...] = ()) -> None:
    """The `result` dataclass's notes on stderr, with --json too (a script that logs stderr
    keeps them, as validate's and inspect's), then on stdout either every field of it and its
    `derived` properties as one JSON object (a script reads it) or its one-line `summary()`."""
    for note in result.notes:
        say(f"note: {note}", err=True)
    if as_json:
        names = [field.name for field in dataclasses.fields(result)] + list(derived)
        click.echo(json_text({name: getattr(result, name) for name in names}, indent=2))
        return
    say(result.summary())
