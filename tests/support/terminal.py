"""stderr as a terminal: where the long-running commands draw their progress bars (off one,
a log file or pipe, they draw none)."""

from __future__ import annotations

import io


class Terminal(io.StringIO):
    """A captured stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True
