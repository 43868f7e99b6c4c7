"""How the processes of `mfsdp train --nproc-per-node N` learn that rank 0 printed the run's
result, after which the command's outcome is that result (`cli.main.settle`).

Rank 0 prints the result itself (its stdout is the command's), so neither torchrun nor the
launching mfsdp saw it: a Ctrl-C or SIGTERM to the process group just after the line
stopped torchrun, which exited 130, and the launcher followed the printed result with
`error: interrupted after step N` (with --json a second JSON object) and exit 130 or 143.
The launching mfsdp names a file in its own private folder in torchrun's environment
(`expect_result`), which torchrun and the ranks inherit; rank 0 creates it once the result
is printed (`mark_result_said`). Whatever ends the run afterwards, torchrun exits 0 and the
launcher exits 0 (`result_said`): a SIGTERM to the launcher alone, or one that reached
torchrun as it exited, still ended the command with 143 after the result, since only
torchrun could tell, by its exit code, and the launcher heard a signal first. torchrun
started on its own names a file in its own per-run folder. Each folder is removed with the
process that made it, so no file outlives the run.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, MutableMapping

RESULT_SAID = "MFSDP_RESULT_SAID"  # the file rank 0 creates once it printed the result


def expect_result(folder: str, env: MutableMapping[str, str] = os.environ) -> None:
    """Have the processes started with `env` from now on (the ranks inherit it through
    torchrun) create `folder`/result_said once rank 0 printed the result; `folder` is the
    caller's, private."""
    env[RESULT_SAID] = os.path.join(folder, "result_said")


def mark_result_said() -> None:
    """In a rank whose launcher waits for it (`expect_result`): the result is printed. A
    file that cannot be made leaves the command as it was before this existed."""
    said = os.environ.get(RESULT_SAID)
    if said:
        with contextlib.suppress(OSError):
            os.close(os.open(said, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def result_said(env: Mapping[str, str] = os.environ) -> bool:
    """Whether rank 0 of the run started with `env` printed the result (then a signal that
    stopped the ranks, or a rank or torchrun that failed, after it changes nothing)."""
    said = env.get(RESULT_SAID)
    return said is not None and os.path.exists(said)
