"""Every line a command prints for people (not --json) goes through `say`.

The lines quote paths and names users and checkpoints choose: a run dir, --out, a model
dir, a tensor name. A file name may hold a newline (which forges a line of its own, such
as `error: ...` under a success), an ANSI or OSC escape (which recolours, clears or retitles
the terminal) or bytes that are not UTF-8. `say` writes them escaped
(`mfsdp_ckpt.check.printable`), as error lines already are; JSON output needs none of
this (json.dumps escapes control characters itself).
"""

from __future__ import annotations

import click

from mfsdp_ckpt.check.printable import printable


def say(line: str, err: bool = False) -> None:
    """Print `line` made printable, on stdout (or stderr with `err`)."""
    click.echo(printable(line), err=err)


__all__ = ["say"]
