"""A bound on one call of a user's reward function (`reward.timeout_s`).

A custom reward function that never returns (an infinite loop, a sympy simplification that
explodes, a code-execution reward waiting on a child) hung the whole run with no line: every
rank waits on the one scoring. The call runs under a real-time interval timer (SIGALRM, main
thread only): when it fires, `RewardTimeout` is raised inside the user's code; it derives from
BaseException, so the usual `except Exception:` in a reward function does not swallow it, and
the timer repeats every second until the call has ended, so one swallowed by a bare `except:`
is raised again. Code that blocks in C without returning to the interpreter is not interrupted
(Python runs signal handlers between bytecodes). Off the main thread, or where SIGALRM already
has a handler of someone else's, the call is not bounded.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

REPEAT_S = 1.0  # after the first expiry, until the call has ended


class RewardTimeout(BaseException):
    """The reward function did not return within its time limit."""


def _expired(signum: int, frame: Any) -> None:
    raise RewardTimeout


def _can_bound() -> bool:
    return (
        hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, signal.SIG_IGN, None)
    )


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise `RewardTimeout` in the body once it has run `seconds` (0: no limit)."""
    if seconds <= 0 or not _can_bound():
        yield
        return
    previous = signal.signal(signal.SIGALRM, _expired)
    signal.setitimer(signal.ITIMER_REAL, seconds, REPEAT_S)
    try:
        yield
    finally:
        _disarm(previous)


def _disarm(previous: Any) -> None:
    """Stop the timer and put the earlier handler back, even when the timer fires meanwhile
    (the call has ended by then; left armed, it would raise somewhere in the training loop)."""
    while True:
        try:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            return
        except RewardTimeout:
            continue
