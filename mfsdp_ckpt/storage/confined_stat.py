"""`os.stat` of a file in a checkpoint that looks at nothing outside the checkpoint.

validate compares each file the manifest lists with the size recorded there. With a plain
`os.stat`, a listed symlink `huggingface/h -> /home/user/notes.txt` was followed: "has 9
bytes, manifest says 1000" told anyone who can edit a checkpoint the size of a file
outside it, and "missing" whether one exists. `os.path.realpath`, which the readers use to
refuse such a link, looks up every component of where it leads, the target included.

Here a path is resolved one component at a time from the checkpoint's root: each symlink's
text is read and checked against the root before anything it names is looked up, so a
link that leads out is refused by name (`LeadsOutError`, "resolves outside") and
nothing outside is stat'ed, opened or listed.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from mfsdp_ckpt.storage.byte_store import CheckpointFileError

MAX_LINKS = 40  # as the kernel's ELOOP: more links followed in one path is a loop


class LeadsOutError(CheckpointFileError):
    """A link (or `..`) in a path leads out of the root it must stay in: a finding about
    that one file, where an unreadable directory on the way stops the read. `target`:
    where it leads, by the link's text (nothing outside was looked up), None when the
    path itself is spelt outside the root."""

    def __init__(self, message: str, target: str | None = None) -> None:
        super().__init__(message)
        self.target = target


def confined_stat(
    path: str | os.PathLike,
    root: str | os.PathLike,
    *,
    follow_symlinks: bool = True,
) -> os.stat_result | None:
    """The stat of `path` (which names something under `root`: `root / name`), resolving
    its symlinks only inside `root`; with `follow_symlinks` False a link at `path` itself
    is reported as the link. None when nothing usable is there: missing, a file where a
    directory is needed, a link loop. LeadsOutError when a link or a `..` leads out of
    `root`; PermissionError for a directory not to be searched."""
    real_root = Path(os.path.realpath(root))
    given_root = _absolute(root)
    try:
        parts = _absolute(path).relative_to(given_root).parts
    except ValueError:
        raise LeadsOutError(f"{path}: resolves outside the checkpoint") from None
    pending = list(reversed(parts))  # a stack: the next component last
    try:
        at_root = os.stat(real_root)
    except (FileNotFoundError, NotADirectoryError):  # the root is gone: nothing under it
        return None
    current, found, links = real_root, at_root, 0  # `found`: the stat of `current`
    leads_to = None  # where the last link followed points, by its text: what a refusal names
    while pending:
        part = pending.pop()
        if part == "..":
            if not stat.S_ISDIR(found.st_mode):  # `file/..`: ENOTDIR, as the kernel says
                return None
            current = current.parent
            if not current.is_relative_to(real_root):
                target = str(leads_to or current)
                raise LeadsOutError(f"{path}: resolves outside the checkpoint ({target})", target)
            found = os.stat(current)
            continue
        candidate = current / part
        try:
            entry = os.lstat(candidate)
        except PermissionError:  # a directory not to be searched: not "missing"
            raise
        except OSError:  # missing, ENOTDIR, ENAMETOOLONG: nothing usable there
            return None
        if not (stat.S_ISLNK(entry.st_mode) and (pending or follow_symlinks)):
            current, found = candidate, entry
            continue
        links += 1
        if links > MAX_LINKS:
            return None
        try:
            text = os.readlink(candidate)
        except OSError:  # replaced meanwhile: nothing usable there
            return None
        if os.path.isabs(text):
            rest = _below(Path(text), (real_root, given_root))
            if rest is None:
                raise LeadsOutError(f"{path}: resolves outside the checkpoint ({text})", text)
            current, found = real_root, at_root
            pending.extend(reversed(rest))
        else:  # relative to the link's own directory, `current`
            leads_to = os.path.normpath(current / text)  # by name only: nothing is looked up
            pending.extend(reversed(Path(text).parts))
    return found


def _absolute(path: str | os.PathLike) -> Path:
    """`path` made absolute without collapsing `..` (pathlib keeps it): `a/link/..` is not
    `a` when `link` is a symlink, so only the walk may decide where `..` leads."""
    given = Path(path)
    return given if given.is_absolute() else Path.cwd() / given


def _below(target: Path, roots: tuple[Path, ...]) -> tuple[str, ...] | None:
    """The components of an absolute link target after the root it starts with (the root's
    real path, or the path the caller named it by), or None when it starts with neither."""
    for root in roots:
        if target.parts[: len(root.parts)] == root.parts:
            return target.parts[len(root.parts) :]
    return None
