"""How a signal stops mfsdp, importable at once (signal and threading only): the entry
point (`cli.main`) catches SIGTERM with it before it imports the command line, and
`cli.errors` reports what it stopped."""

from __future__ import annotations

import signal
import threading
from typing import Any

EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143, as a shell reports a process SIGTERM ended


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill PID`, a scheduler stopping a job, `timeout`), raised where Ctrl-C's
    KeyboardInterrupt is: every cleanup Ctrl-C runs (an export's or a conversion's work dir
    removed, its lock file released, a half-saved checkpoint's temp dir removed) runs for
    it too. Python's default for SIGTERM ends the process at once, and those were left."""


terminated = threading.Event()


def terminate(_signum: int, _frame: Any) -> None:
    """SIGTERM's handler: note it, and raise `Terminated`."""
    terminated.set()
    raise Terminated
