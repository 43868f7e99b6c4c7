"""Every line a command prints for people (not --json) goes through `say`.

The lines quote paths and names users and checkpoints choose: a run dir, --out, a model
dir, a tensor name. A file name may hold a newline (which forges a line of its own, such
as `error: ...` under a success), an ANSI or OSC escape (which recolours, clears or retitles
the terminal) or bytes that are not UTF-8. `say` writes them escaped
(`mfsdp_ckpt.check.printable`), a byte that is not UTF-8 as `\\xff` (`cli.json_text`), as
error lines and JSON output are.
"""

from __future__ import annotations

import click

from cli.json_text import shown_bytes
from mfsdp_ckpt.check.printable import printable


def say(line: str, err: bool = False) -> None:
    """Print `line` made printable, on stdout (or stderr with `err`)."""
    click.echo(printable(shown_bytes(line)), err=err)


__all__ = ["say"]
