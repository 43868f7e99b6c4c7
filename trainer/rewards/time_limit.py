"""A bound on one call of a user's reward function (`reward.timeout_s`).

A custom reward function that never returns (an infinite loop, a sympy simplification that
explodes, a code-execution reward waiting on a child) hung the whole run with no line: every
rank waits on the one scoring. While the call runs, a watchdog thread sends the main thread
SIGALRM once `seconds` have passed, and again every second until the call has ended; the
handler raises `RewardTimeout` inside the user's code. It derives from BaseException, so the
usual `except Exception:` in a reward function does not swallow it (and one a bare `except:`
swallows comes again a second later). A thread, not the process's alarm timer: a reward
function that sets and clears its own `signal.alarm` (math_verify's timeout does) cancelled
that timer, and the run hung again. A blocking system call (a sleep, a read) is interrupted.
Code that runs in C without returning to the interpreter (a power of huge integers from a
response's `9**9**9`, a key derivation) never sees the signal: `STUCK_GRACE_S` after the
limit the watchdog calls `stuck()` instead, which reports the error and ends the process,
since the run cannot go on without that score. C code that also holds the interpreter's
lock (a power of huge integers does) keeps even the watchdog from running: `HELD_GRACE_S`
after the limit, Python's fault handler, which runs without that lock, prints where every
thread is (the reward function's line among them) and ends the process with exit 1.
A reward file that installed its own SIGALRM handler at import (a code-execution reward
bounding its checker with `signal.alarm`) keeps it: until the limit has passed, a SIGALRM
goes to that handler, as it did; from then on it raises `RewardTimeout` (the limit was left
off for such a file, without a word, and a checker that never ended hung the run). Off the
main thread the call is not bounded.
"""

from __future__ import annotations

import contextlib
import faulthandler
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

REPEAT_S = 1.0  # after the first expiry, until the call has ended
STUCK_GRACE_S = 5.0  # after the first expiry, a call still running is stuck outside Python
HELD_GRACE_S = 2 * STUCK_GRACE_S  # after the first expiry: stuck holding the interpreter
WATCHDOG_NAME = "mfsdp-reward-time-limit"
# the longest single wait of the watchdog: a wait past the platform's time_t (a limit of
# 1e10 s) raises OverflowError in the thread, which then watches nothing
LONGEST_WAIT_S = 86400.0


class RewardTimeout(BaseException):
    """The reward function did not return within its time limit."""


def _on_alarm(expired: threading.Event, previous: Any) -> Callable[[int, Any], None]:
    """SIGALRM's handler while a call is bounded: `RewardTimeout` once `expired` is set (the
    watchdog sets it before its first signal), and before that the handler that was there
    (`previous`, the reward file's own) when it is one: its own alarm still goes to it."""

    def handle(signum: int, frame: Any) -> None:
        if expired.is_set() or not callable(previous):
            raise RewardTimeout
        previous(signum, frame)

    return handle


def _can_bound() -> bool:
    return hasattr(signal, "pthread_kill") and threading.current_thread() is (
        threading.main_thread()
    )


@contextlib.contextmanager
def time_limit(seconds: float, stuck: Callable[[], Any] | None = None) -> Iterator[None]:
    """Raise `RewardTimeout` in the body once it has run `seconds` (0: no limit); call
    `stuck` (from the watchdog thread: it must end the process) when the body has not come
    back to the interpreter `STUCK_GRACE_S` after that, and with `stuck` given, have the
    fault handler end the process `HELD_GRACE_S` after it (the body holds the
    interpreter, and the watchdog cannot run)."""
    if seconds <= 0 or not _can_bound():
        yield
        return
    ended, expired = threading.Event(), threading.Event()
    previous = signal.getsignal(signal.SIGALRM)
    signal.signal(signal.SIGALRM, _on_alarm(expired, previous))
    watchdog = threading.Thread(
        target=_watch,
        args=(seconds, ended, expired, threading.main_thread().ident, stuck),
        name=WATCHDOG_NAME,
        daemon=True,
    )
    watchdog.start()
    last_resort = stuck is not None and _arm_fault_handler(seconds + HELD_GRACE_S)
    try:
        yield
    finally:
        if last_resort:
            faulthandler.cancel_dump_traceback_later()
        _disarm(previous, ended, watchdog)


def _arm_fault_handler(seconds: float) -> bool:
    """Have the fault handler print every thread's stack to stderr and end the process once
    `seconds` have passed; False where stderr is no file (a test's captured stream)."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            # file=None is sys.stderr to faulthandler; typeshed's stub leaves None out
            faulthandler.dump_traceback_later(seconds, exit=True, file=stream)  # type: ignore[arg-type]
        except (AttributeError, ValueError, OSError):  # no fileno(), or a closed stream
            continue
        except OverflowError:  # a limit past the platform's time_t: none to arm
            return False
        return True
    return False


def _watch(
    seconds: float,
    ended: threading.Event,
    expired: threading.Event,
    main: int | None,
    stuck: Callable[[], Any] | None,
) -> None:
    """Set `expired` and signal the main thread once `seconds` have passed, then every
    REPEAT_S, until `ended`; `stuck()` once STUCK_GRACE_S of signals went unanswered."""
    due, give_up = time.monotonic() + seconds, None
    while main is not None and not ended.wait(
        min(max(due - time.monotonic(), 0.0), LONGEST_WAIT_S)
    ):
        now = time.monotonic()
        if now < due:  # a long limit, waited for in LONGEST_WAIT_S pieces
            continue
        expired.set()
        signal.pthread_kill(main, signal.SIGALRM)
        give_up = give_up if give_up is not None else now + STUCK_GRACE_S
        if stuck is not None and now >= give_up:
            stuck()
            return
        due = now + min(REPEAT_S, max(give_up - now, 0.0))


def _disarm(previous: Any, ended: threading.Event, watchdog: threading.Thread) -> None:
    """Stop the watchdog and put the earlier handler back, even when a signal it sent lands
    meanwhile (the call has ended by then; left armed, it would raise somewhere in the
    training loop)."""
    while True:
        try:
            ended.set()
            watchdog.join()
            signal.signal(signal.SIGALRM, previous)
            return
        except RewardTimeout:
            continue
