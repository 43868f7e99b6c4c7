"""Why a path someone names is not there yet: a live process holds its output lock.

`mfsdp train` takes its run dir's lock (`out_lock.py`) as it starts and makes the dir only
later, once torch and the model have loaded (seconds; more on a few cores); export-hf and
import-hf hold their `--out`'s lock while they build it hidden. A `mfsdp ckpt validate
runs/conc` meanwhile said only that `runs/conc` does not exist (and offered the lock file
as the path meant). Who holds the lock is read from the kernel's list of locks
(`lock_holder`): the lock file is never opened.
"""

from __future__ import annotations

import os

from mfsdp_ckpt.storage.lock_holder import lock_holder


def output_pending(path: str | os.PathLike) -> str | None:
    """What is under way at the missing `path` (`a run is starting there (pid N), ...`), or
    None when no live process holds its lock."""
    pid = lock_holder(path)
    if pid is None:
        return None
    holder = f"pid {pid}" if pid else "a process in another pid namespace"
    return (
        f"a run is starting there ({holder}), or another mfsdp command is writing it;"
        " no checkpoint yet"
    )


__all__ = ["output_pending"]
