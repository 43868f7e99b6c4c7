"""The threads a tracker's writer starts in the background, whose failure the run reports in
its own line.

TensorBoard's writer writes its event file from a thread of its own. A write that failed
there (a full disk) ended that thread with its traceback on stderr, printed by `threading`'s
default hook, before the run's one-line error said the same: the writer keeps the error and
raises it at its next call, where `MetricsLogger` names the tensorboard dir. The threads a
writer starts are watched here: a failure of theirs is kept, not printed, for the logger to
raise. Every other thread's failure goes to the hook that was there before.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class ThreadFailure:
    """The threads one writer started, and the first exception one of them ended with."""

    def __init__(self) -> None:
        self._before: frozenset[threading.Thread] | None = frozenset(threading.enumerate())
        self._threads: frozenset[threading.Thread] = frozenset()
        self.failure: BaseException | None = None

    def owns(self, thread: threading.Thread | None) -> bool:
        """Whether `thread` is one the writer started: while it starts, any thread not
        running before it began (a first write failing inside its start is one)."""
        if thread is None:
            return False
        if self._before is not None:
            return thread not in self._before
        return thread in self._threads

    def started(self) -> None:
        """The writer has started: its threads are those that run now and did not before."""
        before, self._before = self._before, None
        self._threads = frozenset(threading.enumerate()) - (before or frozenset())


# Held by the logger that owns each: a thread may end with its failure (and reach the hook)
# after the writer raised that failure and the logger closed it, so a watch lasts as long as
# its logger, and no longer.
_WATCHED: weakref.WeakSet[ThreadFailure] = weakref.WeakSet()
_previous_hook = threading.excepthook


def _hook(args: threading.ExceptHookArgs) -> None:
    """`threading.excepthook` while a writer is watched: its threads' failures are kept."""
    for watch in _WATCHED:
        if watch.owns(args.thread):
            if watch.failure is None:
                watch.failure = args.exc_value
            return
    _previous_hook(args)


def started_watched(start: Callable[[], T]) -> tuple[T, ThreadFailure]:
    """What `start` returns (a tracker's writer), and the failure record of the threads it
    started, whose exceptions are kept there from now on, not printed."""
    global _previous_hook
    if threading.excepthook is not _hook:
        _previous_hook, threading.excepthook = threading.excepthook, _hook
    watch = ThreadFailure()
    _WATCHED.add(watch)
    try:
        started = start()
    finally:  # one that failed to start: its threads stay watched as the error is raised
        watch.started()
    return started, watch
