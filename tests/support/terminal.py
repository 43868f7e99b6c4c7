"""The terminal in tests: stderr as one (where the long-running commands draw their progress
bars; off one, a log file or pipe, they draw none), and a value whose escapes would forge
lines on one if printed raw."""

from __future__ import annotations

import io

# A path or config value that, printed raw, would forge an `error:` line, recolour the
# terminal (ANSI CSI) and retitle its window (OSC, ended by BEL).
FORGED = "/nonexist\nerror: forged\x1b[31m\x1b]0;pwned\x07"


def no_forged_lines(stderr: str) -> None:
    """`stderr` printed FORGED escaped: no escape or bell reached it, no line starts as the
    forged error."""
    assert not any(c in stderr for c in "\x1b\x07"), stderr
    assert not any(line.startswith("error: forged") for line in stderr.splitlines()), stderr


class Terminal(io.StringIO):
    """A captured stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True
