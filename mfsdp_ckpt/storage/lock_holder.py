"""Whether a live process holds an output's lock (`out_lock.py`), asked without taking it.

A command that only reads (or that refuses a path) may want to say *why* a directory looks
as it does: a training run's dir without steps is a run still starting, and a
`.sft.out-lock` in a demo's dir is that run's lock. Trying `flock` on the file would answer
too, but for that instant the reader would hold the lock, and a run starting then would be
refused as busy. The kernel lists every `flock` in /proc/locks with its holder's pid and
the file's device and inode, so the answer is read there and the lock file is never opened.
Elsewhere than Linux (no /proc/locks) the answer is "not known to be held".
"""

from __future__ import annotations

import os
from pathlib import Path

from mfsdp_ckpt.storage.out_lock import lock_path_for

PROC_LOCKS = "/proc/locks"
MAX_PROC_LOCKS_BYTES = 4 << 20  # a line per lock held on the machine, ~60 bytes each


def lock_holder(out: str | os.PathLike) -> int | None:
    """The pid of the process holding `out`'s lock, 0 when one holds it whose pid this
    process cannot see (another pid namespace), None when none is known to. The root
    (`/`, `/tmp/..`) has none: nothing is beside it to hold a lock, and no command writes it
    (asking raised ValueError, a traceback for `mfsdp ckpt validate /`)."""
    absolute = Path(os.path.abspath(out))
    if not absolute.name:
        return None
    return file_lock_holder(lock_path_for(absolute))


def file_lock_holder(lock_file: str | os.PathLike) -> int | None:
    """`lock_holder` for the lock file itself (found in a listing, e.g. `.sft.out-lock`)."""
    try:
        info = os.lstat(lock_file)
        with open(PROC_LOCKS, "rb") as handle:
            table = handle.read(MAX_PROC_LOCKS_BYTES)
    except OSError:
        return None
    wanted = (os.major(info.st_dev), os.minor(info.st_dev), info.st_ino)
    for line in table.decode(errors="replace").splitlines():
        # "1: FLOCK  ADVISORY  WRITE 4242 fe:00:2154519 0 EOF"; a waiter's line has "->"
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK":
            continue
        if _device_and_inode(fields[5]) == wanted:
            return int(fields[4]) if fields[4].isdigit() else 0
    return None


def _device_and_inode(text: str) -> tuple[int, int, int] | None:
    """(major, minor, inode) of /proc/locks' `MAJOR:MINOR:INODE` (hex, hex, decimal)."""
    parts = text.split(":")
    try:
        return int(parts[0], 16), int(parts[1], 16), int(parts[2])
    except (IndexError, ValueError):
        return None


__all__ = ["file_lock_holder", "lock_holder"]
