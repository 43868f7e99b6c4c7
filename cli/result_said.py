"""How torchrun (cli/torchrun.py) learns that rank 0 of `mfsdp train --nproc-per-node N`
printed the run's result, after which the command's outcome is settled (`cli.main.settle`).

Rank 0 prints the result itself (its stdout is the command's), so neither torchrun nor the
launching mfsdp saw it: a Ctrl-C or SIGTERM to the process group just after the line
stopped torchrun, which exited 130, and the launcher followed the printed result with
`error: interrupted after step N` (with --json a second JSON object) and exit 130 or 143.
torchrun names a file in its own per-run folder in the ranks' environment
(`expect_result`); rank 0 creates it once the result is printed (`mark_result_said`), and
whatever ends the run afterwards torchrun exits 0 (`result_said`). The folder is removed
with torchrun's, so no file outlives the run.
"""

from __future__ import annotations

import contextlib
import os

RESULT_SAID = "MFSDP_RESULT_SAID"  # the file rank 0 creates once it printed the result


def expect_result(folder: str) -> None:
    """Have the ranks started from now on (they inherit the environment) create
    `folder`/result_said once rank 0 printed the result; `folder` is torchrun's, private."""
    os.environ[RESULT_SAID] = os.path.join(folder, "result_said")


def mark_result_said() -> None:
    """In a rank whose torchrun waits for it (`expect_result`): the result is printed. A
    file that cannot be made leaves the command as it was before this existed."""
    said = os.environ.get(RESULT_SAID)
    if said:
        with contextlib.suppress(OSError):
            os.close(os.open(said, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def result_said() -> bool:
    """Whether rank 0 of the run this torchrun started printed the result (then a signal
    that stopped the ranks, or a rank that failed, after it changes nothing)."""
    said = os.environ.get(RESULT_SAID)
    return said is not None and os.path.exists(said)
