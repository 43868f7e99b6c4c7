"""The signals that stop an mfsdp command as SIGTERM does, and which one came.

SIGTERM (`kill PID`, a scheduler's stop), SIGHUP (a closed terminal or ssh session), SIGQUIT
(Ctrl-\\) and SIGUSR1 (Slurm's `--signal=USR1@T` warning before a job is preempted) each
raise `Terminated` (`cli.stop`), so every cleanup Ctrl-C runs runs for them too (a save in
flight commits), and the command ends with one line naming the signal, `SIGHUP: interrupted
...`, and exit 128 + its number, as a shell reports a process that signal ended. Left to
their default actions, the last three ended the command at once with no line: a save cut
short, a lock file left naming a dead pid. One the command was started ignoring (`nohup`'s
SIGHUP, the SIGQUIT a background job of a non-interactive shell ignores) stays ignored.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

from cli.stop import terminate

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1)
_came: list[int] = []  # the stop signal that came first, once one did


def stop(signum: int, frame: FrameType | None) -> None:
    """The handler of each of STOP_SIGNALS: note the first that came, raise `Terminated`."""
    if not _came:
        _came.append(signum)
    terminate(signum, frame)


def watch(numbers: tuple[int, ...] = STOP_SIGNALS) -> list[int]:
    """Have each of `numbers` whose action is still the default call `stop`, from the main
    thread (nowhere else can handlers be set); the ones it set, for `unwatch`."""
    if threading.current_thread() is not threading.main_thread():
        return []
    _came.clear()  # a command run before in this process (tests, notebooks) does not count
    installed = [number for number in numbers if signal.getsignal(number) == signal.SIG_DFL]
    for number in installed:
        signal.signal(number, stop)
    return installed


def unwatch(installed: list[int]) -> None:
    """Give the signals `watch` set their default action back, unless another handler
    replaced `stop` since (the command's outcome settled: `cli.main.hold_signals`)."""
    for number in installed:
        if signal.getsignal(number) is stop:
            signal.signal(number, signal.SIG_DFL)


def not_ignored(numbers: tuple[int, ...] = STOP_SIGNALS) -> tuple[int, ...]:
    """Those of `numbers` this process was not started ignoring (nor told to ignore since)."""
    return tuple(number for number in numbers if signal.getsignal(number) != signal.SIG_IGN)


def stopped_by() -> int:
    """The stop signal that came first: SIGTERM where none was noted (a `Terminated` raised
    by `cli.stop.terminate` itself)."""
    return _came[0] if _came else signal.SIGTERM


def name_of(number: int) -> str:
    """`SIGHUP` for 1."""
    return signal.Signals(number).name


def said(what: str, number: int | None = None) -> str:
    """`what` (`interrupted after step 5; ...`) as the line of a command the stop signal
    `number` (by default the one that came, `stopped_by`) ended says it."""
    return f"{name_of(stopped_by() if number is None else number)}: {what}"


def exit_code(number: int | None = None) -> int:
    """128 + the stop signal's number (by default the one that came): 143 for SIGTERM."""
    return 128 + int(stopped_by() if number is None else number)


def by_exit_code(code: int) -> int | None:
    """The stop signal whose `exit_code` is `code`, None for any other code."""
    return next((number for number in STOP_SIGNALS if exit_code(number) == code), None)
