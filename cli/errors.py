"""Turn library errors into one clear line and the exit code users script against.

Exit codes: 0 ok, 1 the check or the run failed (bad checkpoint, runtime failure),
2 bad usage (wrong flags, paths that are not what the command needs). Every error mfsdp
raises on purpose derives from `MfsdpError`, whose kind carries the code, so this module
is the one place that maps errors: each command group's `invoke` runs through
`report_errors`. Anything else is a bug in mfsdp and keeps its traceback, so it gets
reported.
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from mfsdp_ckpt.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, MfsdpError

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "MfsdpGroup", "fail", "report_errors"]

EXIT_INTERRUPTED = 130

T = TypeVar("T")


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    """Print `error: <message>` (names from checkpoints made printable) and exit with `code`."""
    from mfsdp_ckpt.check.printable import printable  # messages quote names from checkpoints

    click.echo(f"error: {printable(message)}", err=True)
    sys.exit(code)


def report_errors(run: Callable[[], T]) -> T:
    """Run a command: an `MfsdpError` becomes `error: <message>` and its kind's exit code.

    An OSError is the machine failing the run (disk full, a directory that cannot be
    written; the message names the path), not a bug: exit 1 in one line too. A broken
    pipe (`mfsdp ... | head`) stays click's quiet exit.
    """
    try:
        return run()
    except MfsdpError as err:
        fail(str(err), err.exit_code)
    except OSError as err:
        if err.errno == errno.EPIPE:
            raise
        fail(str(err), EXIT_FAILED)
    except KeyboardInterrupt:
        fail("interrupted", EXIT_INTERRUPTED)


class MfsdpGroup(click.Group):
    """A command group whose commands report errors through `report_errors`, whether it is
    run as `mfsdp` or on its own (`python -m cli.train` under torchrun)."""

    def invoke(self, ctx: click.Context) -> Any:
        return report_errors(lambda: super(MfsdpGroup, self).invoke(ctx))
