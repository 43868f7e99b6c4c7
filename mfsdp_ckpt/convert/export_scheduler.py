"""The export's thread scheduler: tasks in read order under a byte budget, so peak memory
is the largest tensor plus a fixed buffer, whatever the model size.
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

from mfsdp_ckpt.convert.export_plan import ExportPlan, task_cost
from mfsdp_ckpt.convert.export_stream import is_streamable
from mfsdp_ckpt.convert.name_maps import MappedTensor
from mfsdp_ckpt.errors import MfsdpFailedError

MIN_BUFFER_BYTES = 512 << 20


Progress = Callable[[int, int, int, int], None]  # tensors done/total, bytes done/total


class TaskStopped(MfsdpFailedError):
    """A task gave up between two of its windows: the run is stopping (Ctrl-C, or another
    task failed), and what the task wrote is discarded with the rest of the output. Dropped
    by `run_tasks`, which raises the run's own error; a failed run's kind, were it to reach
    the command line."""


class StopFlag(threading.Event):
    """Set once the run stops. Checked by a task between the windows of one tensor, not only
    before a tensor starts: the threads are joined before Ctrl-C exits, and each used to copy
    or cast its whole tensor (minutes for one of many GiB) first."""

    def check(self) -> None:
        """Raise TaskStopped once the run is stopping."""
        if self.is_set():
            raise TaskStopped("the export is stopping")


class _ByteBudget:
    """At most `limit` bytes of tensors in flight; one task may always run alone."""

    def __init__(self, limit: int):
        self.limit, self.in_flight = limit, 0
        self._cond = threading.Condition()

    def acquire(self, cost: int, stop: threading.Event) -> bool:
        """Take `cost` bytes and return True; or, once `stop` is set (a task failed), return
        False having taken nothing, so only a True is ever released."""
        with self._cond:
            while not stop.is_set() and self.in_flight and self.in_flight + cost > self.limit:
                self._cond.wait(0.1)
            if stop.is_set():
                return False
            self.in_flight += cost
            return True

    def release(self, cost: int) -> None:
        with self._cond:
            self.in_flight -= cost
            self._cond.notify_all()


def import_thread_libraries(plan: ExportPlan) -> None:
    """Import here, before any thread starts, the libraries the tasks load on first use:
    numpy (NaN/Inf counted in bytes copied as stored) and, unless every tensor is copied
    as stored, torch. Under memory pressure that first import fails (a shared library that
    cannot be mapped, OpenBLAS starting no threads); in several threads at once each failed
    its own way (a module another thread left half loaded: SystemError, TypeError, numpy
    "importing numpy from its source directory"), and the traceback shown was whichever
    finished first. Here it fails once, in this thread, and `cli.errors` says it as
    running out of memory."""
    importlib.import_module("numpy")
    if "torch" not in sys.modules and not all(_copied_as_stored(plan, item) for item in plan.items):
        importlib.import_module("torch")


def _copied_as_stored(plan: ExportPlan, item: MappedTensor) -> bool:
    """Whether the export copies `item` file to file, its bytes untouched (no torch)."""
    return is_streamable(plan, item) and all(
        plan.dtypes[name] == plan.entry(item).dtype for name in item.targets
    )


def run_tasks(
    plan: ExportPlan,
    work: Callable[[MappedTensor], None],
    workers: int,
    buffer_bytes: int,
    on_done: Callable[[], None] | None,
    cost: Callable[[ExportPlan, MappedTensor], int] = task_cost,
    stop: StopFlag | None = None,
) -> None:
    """Run `work(item)` over the plan in threads under the byte budget, calling `on_done`
    (the progress of tensors done) after each. `stop` is set when the run stops (an error,
    Ctrl-C in this thread): `work` checks it between its windows (`StopFlag.check`)."""
    items = plan.ordered_items()
    import_thread_libraries(plan)
    costs = {item.source: cost(plan, item) for item in items}
    budget = _ByteBudget(max(max(costs.values(), default=0), buffer_bytes))
    stop = StopFlag() if stop is None else stop

    def task(item: MappedTensor) -> None:
        cost = costs[item.source]
        if not budget.acquire(cost, stop):
            return
        try:
            work(item)
        except TaskStopped:
            return  # the run's own error (or Ctrl-C) is what is raised
        finally:
            budget.release(cost)
        if on_done is not None:
            on_done()

    pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="export")
    try:
        futures = [pool.submit(task, item) for item in items]
        finished, _ = wait(futures, return_when=FIRST_EXCEPTION)
        for future in finished:
            error = future.exception()
            if error is not None:
                raise error
    finally:
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
