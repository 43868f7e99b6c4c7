"""Replace a run dir's own file whole: config.yaml as a run starts, metrics.jsonl when a
resumed run drops the records it logs again.

Written in place, a full disk left config.yaml at 0 bytes (truncated, then the write
failed) and the error said "[Errno 28] No space left on device" without a path. Here the
new content goes to a temp file beside the old one, is fsynced, and only then replaces it
(`os.replace`): a full disk or a crash leaves the old file or the new one, and a failure
is one line naming the file.

Nothing is written through a symlink: a run dir copied from elsewhere, or made by hand, may
hold `config.yaml -> ../notes.txt` or `metrics.jsonl -> ~/.bashrc`, and resuming into it
replaced the notes with a config and appended records to the other file. A link where the
run writes is refused (`refuse_link`), one line naming it, and so is anything else there the
run cannot write (`refuse_foreign`: a FIFO or directory where it writes a file);
`trainer.run_dir_links` checks every such name before a run starts.

The temp file is `mfsdp_ckpt.storage.temp_files.new_temp`'s: new, under a random name, never
opened through whatever is already at that name.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from mfsdp_ckpt.errors import MfsdpError, MfsdpFailedError, MfsdpUsageError
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.temp_files import new_temp


class RunFileError(MfsdpFailedError, OSError):
    """A run-dir file could not be replaced (disk full, over a quota); what was there under
    its name is left as it was."""


class RunDirEntryError(MfsdpUsageError, ValueError):
    """Something the run cannot write where it writes in its run dir (exit 2): the user put
    it there, and no rerun changes that."""


class RunDirLinkError(RunDirEntryError):
    """A symlink where the run writes in its run dir (exit 2): writing through it would
    change the file it leads to."""


def refuse_foreign(path: Path, directory: bool) -> None:
    """RunDirEntryError naming `path` when it is anything but what the run writes there: a
    symlink (`refuse_link`), or no directory (`directory`) or no regular file (otherwise),
    such as a FIFO, a socket or a device; nothing there is what the run makes itself.
    Found only once the run wrote there, a directory or FIFO at metrics.jsonl failed the
    run after torch loaded and a step trained, and again on every rerun."""
    refuse_link(path)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    wanted = stat.S_ISDIR(mode) if directory else stat.S_ISREG(mode)
    if not wanted:
        raise RunDirEntryError(
            f"{path}: {safe_files.kind_name(mode)}, not a"
            f" {'directory' if directory else 'regular file'}; the run writes this name"
            " itself: move it away, or choose another trainer.run_dir"
        )


def refuse_link(path: Path) -> None:
    """RunDirLinkError naming `path` when it is a symlink (to anything, or dangling); the
    run dir itself may be one: only the last part of `path` is looked at."""
    if os.path.islink(path):
        raise RunDirLinkError(
            f"{path}: a symlink; the run writes this name itself and never through a link,"
            " which would change what it leads to: move the link away, or choose another"
            " trainer.run_dir"
        )


@contextlib.contextmanager
def replacing(path: Path, what: str) -> Iterator[BinaryIO]:
    """A file to write the new content of `path` into; it replaces `path` when the block
    ends without an error, and is removed when it ends with one. `what` (e.g. "write it")
    says in the error line what could not be done.

    A symlink at `path` is refused (`refuse_link`), and so is anything else but a regular
    file there (a FIFO, a directory), one line naming it: the user put it there. Should a
    link appear at `path` meanwhile, the rename replaces the link, never what it leads to."""
    refuse_link(path)
    if os.path.lexists(path):
        safe_files.regular_file(path)  # CheckpointFileError naming a FIFO or a directory
    created, temp = False, path
    try:
        temp, fd = new_temp(path)
        created = True
        with os.fdopen(fd, "wb") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
        created = False
    except OSError as err:
        if isinstance(err, MfsdpError):  # already one line naming its file
            raise
        kept = "; it is left as it was" if os.path.lexists(path) else ""
        raise RunFileError(f"{path}: cannot {what} ({err.strerror or err}){kept}") from None
    finally:
        if created:
            with contextlib.suppress(OSError):
                temp.unlink()
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable. The file is replaced already, so a failure here is no
    failure to write it (and a file system that cannot fsync a directory is not one)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
