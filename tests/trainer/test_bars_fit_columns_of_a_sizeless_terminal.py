"""On a terminal that reports a size of 0x0 (a pty whose size was never set: `script` without
a controlling terminal, many container runtimes) the bars take their size from COLUMNS and
LINES, as `shutil.get_terminal_size` does: `COLUMNS=20` was drawn 80 columns wide. And an
export's bar, narrowed as the training bar is, keeps its byte counts: tqdm cut it to
`export:  22%|▏| 80.`."""

from __future__ import annotations

import os
import pty
import re
import select
import sys
import time

import pytest

from trainer.progress import FALLBACK_SIZE, CallbackBar, bar_size

ESCAPES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@pytest.fixture
def sizeless_terminal(monkeypatch):
    """A function putting sys.stderr on a new pty (size 0x0, as the kernel makes one; called
    in the test, as pytest sets its own sys.stderr after fixtures) with a TERM that draws
    bars, and returning the pty's other end, where what is drawn is read."""
    leader, follower = pty.openpty()
    assert os.get_terminal_size(follower) == os.terminal_size((0, 0))
    with open(follower, "w", encoding="utf-8") as stream:

        def on_the_terminal() -> int:
            monkeypatch.setattr(sys, "stderr", stream)
            monkeypatch.setenv("TERM", "xterm")
            return leader

        yield on_the_terminal
    os.close(leader)


def _read_all(leader: int) -> str:
    """What reached the pty's other end: the kernel passes it on a moment after the write,
    so read until nothing more comes for a while."""
    drawn = b""
    while select.select([leader], [], [], 0.5)[0]:
        drawn += os.read(leader, 65536)
    return drawn.decode()


@pytest.mark.parametrize(
    ("columns", "lines", "size"),
    [
        ("20", "7", {"ncols": 20, "nrows": 7}),
        (None, None, {"ncols": FALLBACK_SIZE.columns, "nrows": FALLBACK_SIZE.lines}),
        ("0", "wide", {"ncols": FALLBACK_SIZE.columns, "nrows": FALLBACK_SIZE.lines}),
    ],
)
def test_a_sizeless_terminal_takes_columns_and_lines(
    sizeless_terminal, monkeypatch, columns, lines, size
):
    for name, value in (("COLUMNS", columns), ("LINES", lines)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    sizeless_terminal()
    assert bar_size() == size


def test_an_export_bar_keeps_its_figures_in_20_columns(sizeless_terminal, monkeypatch):
    monkeypatch.setenv("COLUMNS", "20")
    leader = sizeless_terminal()
    bar = CallbackBar(enabled=True, unit="B", desc="export", unit_scale=True)
    with bar as update:
        assert update is not None  # drawn: stderr is a terminal
        update(0, 346_000_000)
        time.sleep(0.2)  # past tqdm's mininterval: the next update is drawn
        update(80_000_000, 346_000_000)
    sys.stderr.flush()
    drawn = ESCAPES.sub("", _read_all(leader))
    shown = [line for line in re.split(r"[\r\n]", drawn) if line.strip()]
    assert shown and all(len(line) <= 20 for line in shown), shown
    assert any("80.0M/346M" in line for line in shown), shown
