"""The flags `ckpt export-hf` and `ckpt import-hf` share, and how both print what they did, so
the two read alike."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import click

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
    """With --json, every field of the `result` dataclass, then its `derived` properties, as one
    JSON object on stdout (a script reads it); else its notes on stderr, kept apart from its
    one-line `summary()` on stdout."""
    if as_json:
        names = [field.name for field in dataclasses.fields(result)] + list(derived)
        click.echo(json.dumps({name: getattr(result, name) for name in names}, indent=2))
        return
    for note in result.notes:
        say(f"note: {note}", err=True)
    say(result.summary())
