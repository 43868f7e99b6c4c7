"""The `mfsdp` entry point (pyproject's console script), kept small so that Ctrl-C and
SIGTERM are handled from its first instant.

Importing the command line (click and every command module: `cli.app`) takes 0.1-0.3 s.
A signal in that time ended the process as Python's defaults do: Ctrl-C with a
KeyboardInterrupt traceback, SIGTERM silently (exit -15), and with --json an empty
stdout where a script waits for one JSON object. Here SIGTERM is caught before that
import, and either signal ends the command as `cli.errors` ends one it stopped: the
`error:` line, the JSON object with --json, exit 130 or 143.

Once the command's outcome is settled (its result printed, or its error line about to be),
a Ctrl-C or SIGTERM is ignored until the process exits: restoring Python's defaults there
let a SIGTERM sent just after an export printed its JSON end the process silently with
-15 (the export published, the script told it failed), and interpreter shutdown takes a
while once torch is loaded.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import ModuleType
from typing import Any, NoReturn

from cli.stop import EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated, terminate

# Whether this process ends when the command does (main() called by the program itself),
# so that late signals may be ignored; a test calling main() in-process keeps its handlers.
_ends_with_command = False


def options_of(args: list[str]) -> list[str]:
    """The arguments before a `--` (after it they are the command's own, never mfsdp's)."""
    return args[: args.index("--")] if "--" in args else args


def json_asked(args: list[str]) -> bool:
    """Whether `--json` is among the options: an error then goes to stdout as JSON too."""
    return any(arg == "--json" or arg.startswith("--json=") for arg in options_of(args))


def main() -> None:
    """Run `mfsdp` on sys.argv, SIGTERM raising `Terminated` from the start (as `cli.errors`
    has it raised while a command runs; not in a rank torchrun started, which it stops
    with SIGTERM itself), and both signals ignored once it ended (`settle`)."""
    global _ends_with_command
    _ends_with_command = sys._getframe(1).f_globals.get("__name__") == "__main__"
    watch = (
        threading.current_thread() is threading.main_thread()  # where handlers can be set
        and "RANK" not in os.environ
        and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    )
    if watch:
        signal.signal(signal.SIGTERM, terminate)
    try:
        _imported_app().run()
        sys.stdout.flush()  # output still buffered meets a closed pipe here, not at exit
    except BrokenPipeError:
        end_on_closed_stdout()
    finally:
        settle()
        if watch and not _ends_with_command:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


# What a shell reports for a tool that SIGPIPE ended (128 + 13): the reader of its stdout went
# away (`mfsdp ... | head -1`). Not 1, which says the check or the run failed.
EXIT_CLOSED_PIPE = 128 + signal.SIGPIPE


def end_on_closed_stdout() -> NoReturn:
    """End quietly with `EXIT_CLOSED_PIPE` once writing stdout met a closed pipe, as Unix tools
    end: click's own handling exited 1 with no line, so `ckpt validate RUN | true` under
    `pipefail` called a valid checkpoint invalid, and an import that was written in full
    failed. What the command did before is kept."""
    settle()
    discard_stdout()
    sys.exit(EXIT_CLOSED_PIPE)


def discard_stdout() -> None:
    """Point file descriptor 1 at /dev/null once writing stdout failed: Python flushes
    stdout again at exit, and that second failure printed "Exception ignored ...
    BrokenPipeError" lines (the way Python's documentation gives for SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no descriptor (a test's captured stdout)
        pass


def settle() -> None:
    """The command's outcome is decided: in a process that ends with it, ignore Ctrl-C and
    SIGTERM until the exit, so that its exit status is the command's and no line it printed
    is contradicted. A caller running commands in-process keeps its handlers."""
    if _ends_with_command:
        _ignore_signals()


def _ignore_signals() -> None:
    if threading.current_thread() is threading.main_thread():
        for number in (signal.SIGINT, signal.SIGTERM):
            signal.signal(number, signal.SIG_IGN)


def _imported_app() -> ModuleType:
    """`cli.app`, or the end of the command when a signal stopped its import."""
    try:
        from cli import app
    except KeyboardInterrupt as stopped:
        _stopped(isinstance(stopped, Terminated))
    return app


def _stopped(by_sigterm: bool) -> NoReturn:
    """End as `cli.errors` ends a command a signal stopped (nothing of it is imported yet):
    `error: interrupted` on stderr, with --json also the JSON object on stdout."""
    _ignore_signals()  # a second one must not cut the lines
    message, code = (
        ("SIGTERM: interrupted", EXIT_TERMINATED)
        if by_sigterm
        else ("interrupted", EXIT_INTERRUPTED)
    )
    if json_asked(sys.argv[1:]):
        import json

        _write(sys.stdout, json.dumps({"error": message, "exit_code": code}))
    _write(sys.stderr, f"error: {message}")
    sys.exit(code)


def _write(stream: Any, line: str) -> None:
    """`line` to `stream`, unless it is closed or cannot be written (nothing to tell then)."""
    try:
        stream.write(line + "\n")
        stream.flush()
    except (AttributeError, OSError, ValueError):
        pass


def __getattr__(name: str) -> Any:
    """`from cli.main import app` (scripts and tests drive the click group): `cli.app`'s."""
    if name == "app":
        from cli.app import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":  # `python -m cli.main ...` ran nothing and exited 0
    main()
