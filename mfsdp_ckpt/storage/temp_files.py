"""Temp files a command writes and then renames into place: the checkpoint tracker, a run
dir's config and metrics, `mfsdp data`'s tables, the error file a launched rank leaves for
torchrun. All are made here, so all are made the same safe way.

A temp file is new, under a random name, never opened through whatever is already at that
name: opened by a name made of the pid, a symlink planted there got the content written
into the file it led to, outside the directory written, and was then renamed onto the
target itself. A name made of the pid alone, created exclusively, failed instead on one a
killed writer had left, every time a restart ran under the same pid (a fresh container's).
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path


def new_temp(path: Path) -> tuple[Path, int]:
    """A new hidden file beside `path` to write its next content into, and a write descriptor
    of it; the caller closes it, and removes the file unless it renames it onto `path`.

    It is made with O_CREAT | O_EXCL | O_NOFOLLOW, so nothing already at its name is opened,
    under a name no one can place anything at beforehand (`.<name>.<pid>-<16 random hex>.tmp`).
    The pid in the name says whether its writer still runs (`temp_writer`). The mode is the
    one a file written in place gets: 0o644 less the umask."""
    temp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(8)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    return temp, os.open(temp, flags, 0o644)


def temp_writer(path: Path, name: str) -> int | None:
    """The pid of the process that made the file called `name` as `new_temp(path)`'s temp
    file, None when `name` is no such file's: a caller removes temp files whose writer is
    gone (killed before it could)."""
    found = re.fullmatch(rf"\.{re.escape(path.name)}\.([0-9]+)-[0-9a-f]{{16}}\.tmp", name)
    return int(found.group(1)) if found else None
