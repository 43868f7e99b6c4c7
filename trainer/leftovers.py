"""End what user code (a reward function, custom data code) left running, so that it never
keeps a run alive once the run's outcome is decided.

At exit Python joins every non-daemon thread and every `multiprocessing` child, and a
`multiprocessing.Pool` left open is terminated there and its workers joined, each wait
without a bound: a reward module that kept a pool and then failed left the run asleep
after its error line for good. Here each is ended, or given up on, within a bound: a pool
is terminated (which stops it re-forking the workers ended under it), the processes get
SIGTERM and then SIGKILL, and a thread is waited for briefly (a thread cannot be ended:
the caller then exits without joining it).
"""

from __future__ import annotations

import gc
import multiprocessing
import multiprocessing.pool
import threading
import time
from collections.abc import Collection

# How long what is left running has to end before it is forced (SIGKILL) or given up on
PROCESS_GRACE_S = 1.0
POOL_GRACE_S = 1.0
THREAD_GRACE_S = 1.0


def processes_alive() -> set[multiprocessing.process.BaseProcess]:
    """The `multiprocessing` processes this process started that are running now."""
    return set(multiprocessing.active_children())


def end_processes(processes: Collection[multiprocessing.process.BaseProcess]) -> None:
    """End `processes` (children of this process) and the pools they work for: SIGTERM, then
    SIGKILL for one still running `PROCESS_GRACE_S` later (one that ignores SIGTERM). A pool
    is ended first (`_end_pools`): a worker ended under a live pool is forked again."""
    _end_pools(processes)
    for process in processes:
        if process.is_alive():
            process.terminate()
    deadline = time.monotonic() + PROCESS_GRACE_S
    for process in processes:
        process.join(max(deadline - time.monotonic(), 0.0))
        if process.is_alive():
            process.kill()
            process.join(PROCESS_GRACE_S)


def _end_pools(workers: Collection[multiprocessing.process.BaseProcess]) -> None:
    """Terminate the open `multiprocessing.Pool`s whose workers are among `workers`, each in
    a daemon thread waited for `POOL_GRACE_S`: `Pool.terminate()` joins its workers without
    a bound, and a worker that ignores SIGTERM is killed after (`end_processes`), which lets
    that join return."""
    wanted = set(workers)
    stopping = []
    for held in gc.get_objects():
        # By type: isinstance reads each object's __class__, which some objects warn of
        if issubclass(type(held), multiprocessing.pool.Pool) and _open_pool_of(held, wanted):
            thread = threading.Thread(target=held.terminate, daemon=True)
            thread.start()
            stopping.append(thread)
    deadline = time.monotonic() + POOL_GRACE_S
    for thread in stopping:
        thread.join(max(deadline - time.monotonic(), 0.0))


def _open_pool_of(
    pool: multiprocessing.pool.Pool, workers: set[multiprocessing.process.BaseProcess]
) -> bool:
    """Whether `pool` is still running and has a worker among `workers`."""
    running = getattr(pool, "_state", None) == multiprocessing.pool.RUN
    return running and any(worker in workers for worker in getattr(pool, "_pool", ()))


def end_leftovers() -> bool:
    """End every `multiprocessing` child of this process (and its pool), and wait up to
    `THREAD_GRACE_S` for the non-daemon threads other than this one; whether they all ended
    (False: the exit must not join them, or it never comes). For a process whose command
    has decided its outcome, just before it exits."""
    end_processes(processes_alive())
    deadline = time.monotonic() + THREAD_GRACE_S
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is current or thread.daemon or thread is threading.main_thread():
            continue
        thread.join(max(deadline - time.monotonic(), 0.0))
    return not any(
        thread.is_alive() and not thread.daemon and thread is not current
        for thread in threading.enumerate()
        if thread is not threading.main_thread()
    )
