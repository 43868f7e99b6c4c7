"""Putting a saved step in place for good: the step dir swapped in whole, the tracker
replaced atomically after it, and each fsync that makes the renames durable.

`layout` decides where a checkpoint's files live and reads them; this module is the
writing side a save (the checkpointer, import-hf) and the output writers use, so the
path resolution every reader imports carries none of it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
from pathlib import Path

from mfsdp_ckpt.format.layout import TRACKER_FILE, DamagedRunDirError
from mfsdp_ckpt.format.run_steps import incomplete_step
from mfsdp_ckpt.storage.file_errors import naming_file
from mfsdp_ckpt.storage.temp_files import new_temp


def write_tracker(run_dir: str | os.PathLike, step: int) -> None:
    """Replace the tracker atomically: readers see the old step or the new one, never neither.
    A failure (a full disk) removes the temp file again: it was left beside the tracker.

    The temp file is `temp_files.new_temp`'s: created new under a random name, so nothing
    already at its name is written through (a symlink placed at a pid's name got the step
    number written into the file it led to)."""
    tracker = Path(run_dir) / TRACKER_FILE
    tmp, fd = new_temp(tracker)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(f"{step}\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, tracker)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_path(tracker.parent)


def replace_dir(new: Path, target: Path) -> str | None:
    """Rename a finished step directory onto `target`; an existing one is removed only after
    the new one is in place, so at every instant one whole version exists. On Linux the two
    are swapped in one `renameat2(RENAME_EXCHANGE)` and a missing target is created with
    `RENAME_NOREPLACE`, so no instant shows neither and nothing appearing meanwhile is
    replaced; elsewhere the old one is moved aside first. A symlink there is replaced, never
    what it leads to. Anything else there (a file) is the user's, not a step: refused
    (DamagedRunDirError), neither moved nor removed; it was moved aside, then removing it as
    a directory failed the save half done, the new step in place and the tracker not.

    Returns a warning line when the replaced version could not be removed after the swap:
    the new step is in place then, so the save goes on (it failed there, the tracker not
    yet pointing at the step it had just put in place)."""
    from mfsdp_ckpt.storage.out_dir import exchange, rename_noreplace

    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        mode = None
    left = None
    if mode is None:
        rename_noreplace(new, target)
    elif not (stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
        raise DamagedRunDirError(f"{target} {incomplete_step(target)}: move it away")
    elif stat.S_ISDIR(mode) and exchange(new, target):
        # `new` holds the old version now; under its temp name the next save's prune
        # (retention.prune_steps) removes it if this cannot
        left = _remove_replaced(new, target, "the next save tries again")
    else:
        aside = target.with_name(f".{target.name}.old-{secrets.token_hex(8)}")
        os.rename(target, aside)
        os.rename(new, target)
        if stat.S_ISLNK(mode):
            aside.unlink()
        else:
            left = _remove_replaced(aside, target, "remove it by hand")
    fsync_path(target.parent)
    return left


def _remove_replaced(old: Path, target: Path, then: str) -> str | None:
    """Remove the version of `target` that a save replaced; one that cannot be removed is
    a warning line naming it."""
    try:
        shutil.rmtree(old)
    except FileNotFoundError:
        return None
    except OSError as err:
        return (
            f"warning: {old}: the earlier {target.name} that this save replaced was not "
            f"removed ({err.strerror or err}); {then}"
        )
    return None


def fsync_path(path: str | os.PathLike) -> None:
    """Flush a file, or a directory's entries (POSIX needs that for a rename to be durable).
    A failure names `path`: `fsync` of a descriptor raises an OSError naming no file, which
    a save could only pin on its temp dir as a whole."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as err:
        raise naming_file(err, path) from None
    finally:
        os.close(fd)
