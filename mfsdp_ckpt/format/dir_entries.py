"""Looks at the entries of a checkpoint on disk that answer instead of raising a traceback.

Telling a layout apart stats and lists many entries, any of which may be missing, a link,
a FIFO or unreadable. Every module that resolves or lists checkpoints asks here, so a
missing entry is "not there", an unreadable directory is one line naming it (exit 1), and
a link never leads a look outside the checkpoint.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.format.layout import DCP_METADATA_FILE, CheckpointPathError
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.confined_stat import LeadsOutError, confined_stat


def is_file(path: Path) -> bool:
    """lstat-based: a symlink, FIFO or unreadable entry is not taken as the file it names."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def is_dir(path: Path) -> bool:
    """`Path.is_dir` (links followed), except that what cannot be stat'ed is no directory
    instead of an error: a missing entry, a link loop, a name too long."""
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except OSError:  # missing, ELOOP, ENAMETOOLONG: not a directory we can use
        return False


def children(directory: Path) -> list[str]:
    """The names in `directory`, sorted; a directory this user may not list is a failed read
    naming it (`unreadable`, exit 1), any other failure a CheckpointPathError."""
    try:
        return sorted(os.listdir(directory))
    except PermissionError as err:
        raise unreadable(directory, "cannot list", err) from None
    except OSError as err:
        raise CheckpointPathError(f"{directory}: cannot list ({err.strerror or err})") from None


def is_dcp(directory: Path) -> bool:
    """A `.metadata` that is not a directory marks a DCP dir, whatever else it is: a FIFO,
    a link loop or a link to a device there is a damaged checkpoint (exit 1, the reader
    names what `.metadata` is), not a path that holds none (exit 2). A `.metadata/`
    directory belongs to other tools (an Eclipse workspace)."""
    metadata = directory / DCP_METADATA_FILE
    try:
        os.lstat(metadata)
    except PermissionError as err:  # mode 000: a checkpoint we may not read, not "none here"
        raise unreadable(directory, "cannot open", err) from None
    except OSError:
        return False
    return not is_dir(metadata)


def unreadable(path: Path, what: str, err: OSError) -> CheckpointFileError:
    """A directory this user may not read (exit 1, naming it): what it holds is unknown, so
    it is neither "not a checkpoint" nor bad usage."""
    return CheckpointFileError(f"{cut_to(str(path), 200)}: {what} ({err.strerror or err})")


def stat_inside(
    path: Path, root: str | os.PathLike, follow_symlinks: bool = True
) -> os.stat_result | None:
    """`os.stat` of a file in the checkpoint `root`, None when nothing is there. Its links
    are resolved inside `root` only (`confined_stat`): one that leads out is a
    LeadsOutError ("resolves outside the checkpoint") and nothing outside is looked
    at, so a checkpoint's findings never tell the size or the existence of a file outside
    it. A directory on the way that this user may not enter (a `huggingface/` of mode 000)
    is a failed read naming that directory (`unreadable`, exit 1): what it holds is
    unknown, so the file is neither missing nor present, and errno's raw "[Errno 13] ...
    config.json" says neither."""
    try:
        return confined_stat(path, root, follow_symlinks=follow_symlinks)
    except PermissionError as err:
        blocked = next((p for p in path.parents if os.path.lexists(p)), path.parent)
        raise unreadable(blocked, "cannot open", err) from None


def leads_out(path: Path, root: str | os.PathLike) -> bool:
    """Whether a link (or `..`) on the way to `path`, `path` itself included, leads out of
    `root`, found without looking at anything outside (`confined_stat`): what lies there
    is not the checkpoint's, so no verdict on `root` may hang on it, and reading it names
    the link. A directory not to be searched is left to reading it to name."""
    try:
        confined_stat(path, root)
    except LeadsOutError:
        return True
    except PermissionError:
        return False
    return False
