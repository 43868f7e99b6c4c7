"""A parsed `.metadata` handed on from one reader of it to the next, once.

Naming a DCP dir's layout can need its `.metadata` read in full (is it torchtitan's?),
and the command reads the same file next: for a large run's file that is minutes of
unpickling and checking twice. The first reader leaves what it parsed here; the next
reader of the same file takes it instead of reading again. One entry only (a later one
replaces it), so memory holds at most one parsed metadata beside the readers' own, and
taking it empties the slot: a later reader, or a later command in the same process,
reads the file afresh (and shows its progress again).

The entry is keyed by the file's resolved path and its identity on disk (device, inode,
size, mtime in ns), taken before and after the read: a file replaced or rewritten in
between is not handed on, and one replaced after it is read again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FileIdentity:
    """Which file, and which version of it: a replaced or rewritten file differs."""

    path: str
    device: int
    inode: int
    size: int
    mtime_ns: int


def identity(path: str | os.PathLike) -> FileIdentity | None:
    """The identity of the file at `path` now; None when it cannot be stat'ed (the reader
    then reports what is wrong with it)."""
    real = os.path.realpath(path)
    try:
        stat = os.stat(real)
    except OSError:
        return None
    return FileIdentity(real, stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


_slot: tuple[FileIdentity, Any] | None = None


def leave(key: FileIdentity, parsed: Any) -> None:
    """Hand `parsed`, what was read from the file `key` names, to its next reader."""
    global _slot
    _slot = (key, parsed)


def take(key: FileIdentity | None) -> Any | None:
    """What was left for the file `key` names, emptying the slot; None if nothing was
    left for it as it is now."""
    global _slot
    if key is None or _slot is None or _slot[0] != key:
        return None
    parsed = _slot[1]
    _slot = None
    return parsed


__all__ = ["FileIdentity", "identity", "leave", "take"]
