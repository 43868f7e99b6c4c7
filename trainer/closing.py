"""Closing what a run holds (an async save in flight, its trackers, its progress bar, its
rollout engine, its process group) on the way out, without losing why the run ended.

A `finally` whose close fails replaces the exception in flight with its own: TensorBoard's
writer, whose thread had died on a full disk, raised that error again as the run closed it,
and the line naming the checkpoint to resume from gave way to a bare
`error: No space left on device`. Here every closer runs, and the run's own error is the one
reported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable


def close_all(closers: Iterable[Callable[[], object]], failure: BaseException | None) -> None:
    """Call each of `closers`, every one even when one before it failed or was interrupted.
    With `failure`, the exception ending the block they clean up after, their failures are
    dropped: the caller raises that one on, and it says why the run ended. Without, the
    first of their failures is raised once all ran: a close that fails after a run that went
    well fails the run. A Ctrl-C or stop signal (KeyboardInterrupt, `cli.stop.Terminated`)
    raised by one closer lets the others run, then goes on in place of both: a second
    Ctrl-C held back while an async save committed was raised as that wait ended, and the
    trackers, the bar and the rollout engine after it were never closed."""
    first: Exception | None = None
    stopped: BaseException | None = None
    for close in closers:
        try:
            close()
        except Exception as err:
            if first is None:
                first = err
        except BaseException as err:  # how the process stops: its exit code and line
            if stopped is None:
                stopped = err
    if stopped is not None:
        raise stopped
    if first is not None and failure is None:
        raise first
