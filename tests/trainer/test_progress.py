"""The progress bars: drawn on a terminal only, fed (done, total) by library callbacks."""

from __future__ import annotations

import io

import pytest

from tests.support.terminal import Terminal
from trainer.progress import CallbackBar, step_bar


def test_callback_bar_draws_done_of_total_on_a_terminal(monkeypatch: pytest.MonkeyPatch):
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    with CallbackBar(enabled=True, unit="tensor") as update:
        assert update is not None
        update(3, 8)
        update(5, 8, "5/8 tensors")
    assert "0/8" in terminal.getvalue() and "tensor" in terminal.getvalue()  # total and unit


@pytest.mark.parametrize("enabled, terminal", [(False, True), (True, False)])
def test_callback_bar_is_silent_off_a_terminal_or_when_disabled(
    monkeypatch: pytest.MonkeyPatch, enabled: bool, terminal: bool
):
    stderr = Terminal() if terminal else io.StringIO()
    monkeypatch.setattr("sys.stderr", stderr)
    bar = CallbackBar(enabled=enabled, unit="B", unit_scale=True)
    with bar as update:
        assert (update is None) == (not enabled)  # disabled: the library skips its calls
    bar.update(1, 2)  # off a terminal: a plain line, and only after FIRST_PLAIN_LINE_SECONDS
    assert stderr.getvalue() == ""


def test_step_bar_starts_at_the_resumed_step(monkeypatch: pytest.MonkeyPatch):
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    bar = step_bar("sft", total=10, initial=4, enabled=True)
    bar.update(1)
    bar.close()
    assert "5/10" in terminal.getvalue()
