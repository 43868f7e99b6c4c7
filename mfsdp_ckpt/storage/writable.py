"""Whether this process can create files where a command will write, asked before any work.

Otherwise the first write failed late, as the errno of whichever file came first
(`[Errno 30] Read-only file system: '.../.hf.out-lock'`): an internal file's name, not the
option or directory the user gave. One check, so `--out` of every command and
`trainer.run_dir` are refused in the same words.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable

from mfsdp_ckpt.errors import MfsdpUsageError


def require_writable_dir(
    key: str,
    value: str | os.PathLike,
    *,
    beside: bool = False,
    error: Callable[[str], Exception] = MfsdpUsageError,
) -> None:
    """`value` (a directory that exists or is to be created) is one this process can create
    files in: the nearest of it and its parents that exists must be a writable directory
    (`beside`: start at its parent, for commands that build the directory next to it and
    rename it into place). Else raise `error` with one line naming `key` and `value`."""
    given = f"{key} {value}" if key.startswith("-") else f"{key}: {value}"  # as typed
    path = os.path.abspath(value)
    link = _unreachable_link(path)
    if link is not None:
        raise error(f"{given}: {link}; choose another {key}")
    existing = os.path.dirname(path) if beside else path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise error(f"{given}: {existing} is a file, not a directory")
    _require_short_names(given, path, existing, error)
    if not os.access(existing, os.W_OK | os.X_OK):
        read_only = os.statvfs(existing).f_flag & os.ST_RDONLY
        why = "is on a read-only file system" if read_only else "is not writable by this user"
        raise error(f"{given}: {existing} {why}; choose another {key}")


def _unreachable_link(path: str) -> str | None:
    """What is wrong with the first of `path`'s parents or itself that is a symlink leading
    nowhere: a loop (`l1 -> l2 -> l1`), or a link to a missing target (`run -> nowhere`,
    a disk not mounted). Such a link neither exists nor is missing: each command failed in
    its own way, late (`[Errno 17] File exists` once the model was built, "is a file", a
    traceback from `Path.resolve`). None when there is none."""
    parts = path.split(os.sep)
    for end in range(2, len(parts) + 1):
        prefix = os.sep.join(parts[:end])
        try:
            os.stat(prefix)
        except OSError as err:  # missing or a file: so is all below it
            if err.errno == errno.ELOOP:
                return f"{prefix} is a symlink loop (its links lead back to themselves)"
            if err.errno in (errno.ENOENT, errno.ENOTDIR) and os.path.islink(prefix):
                where = "" if prefix == path else f"{prefix} is "
                return f"{where}a symlink to a missing target ({os.readlink(prefix)})"
            return None
    return None


def not_a_directory(path: str | os.PathLike) -> str:
    """Why `path`, which is there but cannot be made a directory or entered, is not one:
    for the one line naming it (a dangling link read as "is a file")."""
    if os.path.islink(path) and not os.path.exists(path):
        return f"{path} is a symlink to a missing target ({os.readlink(os.fspath(path))})"
    return f"{path} is a file, not a directory"


def _require_short_names(
    given: str, path: str, existing: str, error: Callable[[str], Exception]
) -> None:
    """The names still to be created under `existing` fit its file system (NAME_MAX bytes
    each, PATH_MAX in all): a longer one failed at the first mkdir, as errno's raw
    `[Errno 36] File name too long` with exit 1, after the work had begun."""
    name_max = os.pathconf(existing, "PC_NAME_MAX")
    for name in os.path.relpath(path, existing).split(os.sep):
        if len(os.fsencode(name)) > name_max:
            raise error(
                f"{given}: a name of {len(os.fsencode(name))} bytes, too long for the file"
                f" system (at most {name_max})"
            )
    path_max = os.pathconf(existing, "PC_PATH_MAX")
    if len(os.fsencode(path)) >= path_max:
        raise error(
            f"{given}: {len(os.fsencode(path))} bytes, too long for the file system (a path"
            f" has fewer than {path_max})"
        )
