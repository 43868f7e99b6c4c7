"""Removing a directory tree a command replaces or leaves behind: whether it can be removed,
checked before any work, and removing it so that a failure names the file it failed on.

`--overwrite` onto an earlier export made read-only (`chmod 555`) published the new export,
then failed deleting the old one: `[Errno 13] Permission denied: 'tokenizer.json'` (rmtree
names a file relative to a directory it does not say), exit 1 after a success, and the old
export left hidden beside `--out` for good, since the cleanup of such leftovers ignored
errors. Removing a directory's entries needs write and search permission on it, which
`unremovable_dir` checks up front over the whole tree; `remove_tree` removes what it can and
returns the first failure with the full path of its file, for a warning line.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from mfsdp_ckpt.storage.file_errors import NOT_ABOUT_THE_FILE

# An export's tree is a few directories (chat templates, a PEFT adapter); a tree of more is
# not walked further up front: its removal still names any entry it cannot remove.
MAX_CHECKED_DIRS = 1000
_REMOVE_ENTRIES = os.W_OK | os.X_OK  # on a directory: its entries may be unlinked
_LIST_ENTRIES = os.R_OK | os.X_OK  # and listed, to find them


def unremovable_dir(root: Path) -> Path | None:
    """The first directory of the tree at `root` (itself included; symlinks not followed)
    whose entries this process may not list and remove, or None: none found among its first
    MAX_CHECKED_DIRS directories. An empty one needs only to be listed."""
    pending, seen = [root], 0
    while pending and seen < MAX_CHECKED_DIRS:
        directory = pending.pop()
        seen += 1
        if not _may(directory, _LIST_ENTRIES):
            return directory
        may_remove = _may(directory, _REMOVE_ENTRIES)
        try:
            with os.scandir(directory) as entries:
                for entry in entries:  # one entry is enough to need the right to remove it
                    if not may_remove:
                        return directory
                    if entry.is_dir(follow_symlinks=False) and len(pending) < MAX_CHECKED_DIRS:
                        pending.append(Path(entry.path))
        except OSError:
            return directory
    return None


def _may(path: Path, mode: int) -> bool:
    """access(2) for this process's effective ids where the system can (a setuid or
    capability-dropped process is judged as it will act), else its real ids."""
    effective = os.access in os.supports_effective_ids
    return os.access(path, mode, effective_ids=effective)


def remove_tree(root: Path) -> OSError | None:
    """Remove the tree at `root`, going on past what cannot be removed; None when all of it
    went (or nothing was there), else the first failure, naming its file's full path."""
    failures: list[OSError] = []

    def failed(_function: Any, path: str, error: Any) -> None:
        err = error[1] if isinstance(error, tuple) else error  # onerror's exc_info; onexc's
        if isinstance(err, FileNotFoundError):
            return  # removed meanwhile: gone as asked
        if isinstance(err, OSError):
            named = () if err.errno in NOT_ABOUT_THE_FILE else (path,)  # ENOMEM: not the file's
            failures.append(OSError(err.errno, err.strerror or str(err), *named))
        else:
            failures.append(OSError(0, str(err), path))

    if sys.version_info >= (3, 12):
        shutil.rmtree(root, onexc=failed)
    else:
        shutil.rmtree(root, onerror=failed)
    return failures[0] if failures else None


def failure_words(err: OSError) -> str:
    """`PATH: reason` for a failure `remove_tree` returned."""
    return f"{err.filename}: {err.strerror}"
