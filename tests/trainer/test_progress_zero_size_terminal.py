"""A terminal that reports a size of 0 columns and 0 lines (a pty whose size was never set:
some container runtimes and serial consoles) still shows the bars: tqdm drew a bar of no
characters there and, with 0 lines, hid every bar as past the screen's last row."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

import pytest

from tests.support.paths import REPO, repo_env

DRAW_BOTH_BARS = """
from trainer.progress import CallbackBar, item_bar, step_bar
bar = step_bar("sft", total=5, initial=0, enabled=True)
for _ in range(5):
    bar.update(1)
bar.close()
with CallbackBar(enabled=True, unit="B", desc="export") as update:
    update(1, 5)
for _ in item_bar(range(3), "tokenize rows", enabled=True):
    pass
"""


def _drawn_on_a_terminal_of(columns: int, lines: int) -> str:
    """What the two bars write on a real pty whose size is (columns, lines)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
    env = {**repo_env(), "TERM": "xterm"}
    with subprocess.Popen(
        [sys.executable, "-c", DRAW_BOTH_BARS], stderr=follower, env=env, cwd=REPO
    ) as child:
        os.close(follower)
        written = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the pty closes with the child
                break
            if not chunk:
                break
            written += chunk
        assert child.wait(timeout=60) == 0, written.decode(errors="replace")
    os.close(leader)
    return written.decode(errors="replace")


@pytest.mark.parametrize(("columns", "lines"), [(0, 0), (0, 40), (100, 0)])
def test_bars_show_on_a_terminal_reporting_no_size(columns, lines):
    drawn = _drawn_on_a_terminal_of(columns, lines)
    assert "sft: 100%" in drawn and "5/5" in drawn
    assert "export:   0%" in drawn  # drawn as it starts; removed as it ends (leave=False)
    assert "tokenize rows:   0%" in drawn


def test_bars_follow_a_terminal_of_known_size():
    drawn = _drawn_on_a_terminal_of(60, 24)
    widest = max(len(line.strip("\n")) for line in drawn.split("\r"))
    assert "sft: 100%" in drawn and widest <= 60
