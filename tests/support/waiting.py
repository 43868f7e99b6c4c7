"""Wait for a process the test started to reach a point (a file written, a line logged, a
process gone) before the test acts on it: signal and lock tests send their signal only once
the run is where the test means it to be.

One loop, so each wait fails alike: within its time, and at once when the process it waits on
has ended (what it waited for will never come), with what the caller says to show why.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable


def wait_until(
    ready: Callable[[], object],
    seconds: float,
    why: Callable[[], object] = lambda: "",
    process: subprocess.Popen | None = None,
    every: float = 0.05,
) -> None:
    """Call `ready` every `every` seconds until it returns something true. Fail, with `why()`,
    once `seconds` have passed, or as soon as `process` (when given) has ended."""
    deadline = time.monotonic() + seconds
    while not ready():
        assert process is None or process.poll() is None, f"the process ended first: {why()}"
        assert time.monotonic() < deadline, f"not so within {seconds} s: {why()}"
        time.sleep(every)
