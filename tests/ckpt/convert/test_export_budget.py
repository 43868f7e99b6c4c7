"""The export's byte budget: a task that gives up (another task failed) releases nothing it
did not take, so the budget ends at zero however the export ends."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from mfsdp_ckpt.convert import export_scheduler


def test_acquire_after_stop_takes_nothing():
    budget, stop = export_scheduler._ByteBudget(10), threading.Event()
    assert budget.acquire(8, stop)
    stop.set()
    assert not budget.acquire(8, stop)  # would wait for room: gives up instead
    assert not budget.acquire(1, stop)  # would fit: still gives up, taking nothing
    assert budget.in_flight == 8


def test_budget_is_back_to_zero_after_a_failed_export(monkeypatch):
    budgets = []

    class RecordedBudget(export_scheduler._ByteBudget):
        def __init__(self, limit: int):
            super().__init__(limit)
            budgets.append(self)

    monkeypatch.setattr(export_scheduler, "_ByteBudget", RecordedBudget)
    # the budget alone is under test: no plan here to tell which libraries its tasks load
    monkeypatch.setattr(export_scheduler, "import_thread_libraries", lambda _plan: None)
    items = [SimpleNamespace(source=f"t{i}") for i in range(8)]
    plan = SimpleNamespace(ordered_items=lambda: items)

    def work(item) -> None:
        if item.source == "t0":
            raise OSError(28, "No space left on device")
        time.sleep(0.2)  # the others hold or wait for the budget when the export stops

    with pytest.raises(OSError):
        export_scheduler.run_tasks(
            plan,
            work,
            workers=4,
            buffer_bytes=10,
            on_done=None,
            cost=lambda _plan, _item: 10,
        )
    assert budgets[0].in_flight == 0
