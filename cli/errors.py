"""Turn library errors into one clear line and the exit code users script against.

Exit codes: 0 ok, 1 the check or the run failed (bad checkpoint, runtime failure),
2 bad usage (wrong flags, paths that are not what the command needs). Every error mfsdp
raises on purpose derives from `MfsdpError`, whose kind carries the code, so this module
is the one place that maps errors: each command group's `invoke` runs through
`report_errors`. Anything else is a bug in mfsdp and keeps its traceback, so it gets
reported.

A command given `--json` promises its stdout is one JSON object, failed or not: a script
piping it to `jq` must not choke on empty output. Its error then also goes to stdout as
`{"error": <message>, "exit_code": <code>}` (the `error:` line on stderr stays).
"""

from __future__ import annotations

import errno
import json
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from mfsdp_ckpt.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, MfsdpError

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "MfsdpGroup",
    "fail",
    "remember_json",
    "report_errors",
]

EXIT_INTERRUPTED = 130
JSON_OUTPUT = "mfsdp.json_output"  # click ctx.meta key (shared by nested contexts)

T = TypeVar("T")


def remember_json(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    """`--json`'s callback: note on the context that errors must be JSON on stdout too."""
    if value:
        ctx.meta[JSON_OUTPUT] = True
    return value


def fail(message: str, code: int = EXIT_FAILED, as_json: bool = False) -> NoReturn:
    """Print `error: <message>` (names from checkpoints made printable) and exit with `code`;
    with `as_json` the message and code also go to stdout as one JSON object."""
    from mfsdp_ckpt.check.printable import printable  # messages quote names from checkpoints

    text = printable(message)
    if as_json:
        click.echo(json.dumps({"error": text, "exit_code": code}))
    click.echo(f"error: {text}", err=True)
    sys.exit(code)


def report_errors(run: Callable[[], T], as_json: Callable[[], bool] = lambda: False) -> T:
    """Run a command: an `MfsdpError` becomes `error: <message>` and its kind's exit code
    (and a JSON object on stdout when `as_json()`: the command was given --json).

    An OSError is the machine failing the run (disk full, a directory that cannot be
    written; the message names the path), not a bug: exit 1 in one line too. A broken
    pipe (`mfsdp ... | head`) stays click's quiet exit.
    """
    try:
        return run()
    except MfsdpError as err:
        fail(str(err), err.exit_code, as_json())
    except OSError as err:
        if err.errno == errno.EPIPE:
            raise
        fail(str(err), EXIT_FAILED, as_json())
    except KeyboardInterrupt:
        fail("interrupted", EXIT_INTERRUPTED, as_json())


class MfsdpGroup(click.Group):
    """A command group whose commands report errors through `report_errors`, whether it is
    run as `mfsdp` or on its own (`python -m cli.train` under torchrun)."""

    def invoke(self, ctx: click.Context) -> Any:
        return report_errors(
            lambda: super(MfsdpGroup, self).invoke(ctx),
            lambda: bool(ctx.meta.get(JSON_OUTPUT)),
        )
