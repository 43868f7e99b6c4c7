"""On a dumb terminal (TERM=dumb, Emacs' shell and M-x compile, or no TERM) no bar is drawn:
tqdm's cursor-up escapes and Unicode blocks came out as garbage there. The trainer prints
its plain line per logged step instead, as into a log file, and a large `.metadata` read
says its one line."""

from __future__ import annotations

import pytest

from cli.metadata_progress import metadata_progress
from mfsdp_ckpt.format import dcp_metadata
from tests.support.terminal import Terminal
from trainer.progress import CallbackBar, bars_drawn, draws_bars


def _terminal(monkeypatch: pytest.MonkeyPatch, term: str | None) -> Terminal:
    """stderr a terminal of TERM `term` (None: unset); set in the test itself, since pytest
    puts its own capture back as sys.stderr once fixtures ran."""
    stderr = Terminal()
    monkeypatch.setattr("sys.stderr", stderr)
    if term is None:
        monkeypatch.delenv("TERM", raising=False)
    else:
        monkeypatch.setenv("TERM", term)
    return stderr


@pytest.mark.parametrize("term", ["dumb", "", None])
def test_no_bar_on_a_dumb_terminal(monkeypatch, term):
    stderr = _terminal(monkeypatch, term)
    assert not bars_drawn() and not draws_bars(True)
    with CallbackBar(enabled=True, unit="B") as update:
        update(1, 10)  # no bar: a plain line, and only after FIRST_PLAIN_LINE_SECONDS
    assert stderr.getvalue() == ""


def test_bars_on_a_terminal_that_moves_its_cursor(monkeypatch):
    _terminal(monkeypatch, "xterm-256color")
    assert bars_drawn() and draws_bars(True)


def test_a_metadata_read_says_its_line_on_a_dumb_terminal(monkeypatch):
    stderr = _terminal(monkeypatch, "dumb")
    with metadata_progress():
        reporting = dcp_metadata._read_progress.get()  # what a large read reports to
        assert reporting is not None
        report, _checking = reporting
        report("x/.metadata", 0, 2**20)
    assert stderr.getvalue() == "reading x/.metadata (1.0 MiB) ...\n"
