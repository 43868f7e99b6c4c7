"""Turn library errors into one clear line and the exit code users script against.

Exit codes: 0 ok, 1 the check or the run failed (bad checkpoint, runtime failure),
2 bad usage (wrong flags, paths that are not what the command needs).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str, code: int = EXIT_FAILED) -> None:
    from mfsdp_ckpt.printable import printable  # messages quote names from checkpoints

    click.echo(f"error: {printable(message)}", err=True)
    sys.exit(code)


def friendly_errors(usage: tuple[type[BaseException], ...] = (), failure: tuple[type[BaseException], ...] = ()) -> Callable[[F], F]:
    """Map exception types to `error: <message>` and exit 2 (usage) or 1 (failure).

    Anything else is a bug in mfsdp and keeps its traceback, so it gets reported.
    """

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return command(*args, **kwargs)
            except usage as err:
                fail(str(err), EXIT_USAGE)
            except failure as err:
                fail(str(err), EXIT_FAILED)
            except KeyboardInterrupt:
                fail("interrupted", 130)

        return wrapper  # type: ignore[return-value]

    return decorate
