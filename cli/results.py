"""How `ckpt export-hf` and `ckpt import-hf` print what they did, so both read alike."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import click

from cli.lines import say


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
