"""A checkpoint removed while it was read is said to be so, not reported as damaged.

A run saving with `keep_last` deletes its old steps as it saves new ones; a command reading
one of them meanwhile (`validate`, `export-hf`, `inspect`, a run resuming from another
run's dir) met its files going one by one and said "`__0_1.distcp`: file is missing", as if
the step were damaged. Every reader of a step goes through this module: when its read
fails, the step's directories are compared with what they were when the read began (and a
run dir's tracker with the step it named), and a change is one line saying the step was
removed while it was read, exit 1, and to read it again. A reader that goes on past what
it cannot read (`inspect` shows an entry "not decoded", a record's problem) compares them
when its result records such a thing (`describes_checkpoint`), as validate does when its
findings are not clean: else half a step was described as if it were whole. A whole
description of a step removed after it was read is printed: refusing it too made inspect
fail every time on the steps of a run saving every few seconds.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from mfsdp_ckpt.errors import MfsdpError, MfsdpFailedError
from mfsdp_ckpt.format import checkpoint_resolution, layout, run_steps
from mfsdp_ckpt.storage.tensorstore_store import is_url

_P = ParamSpec("_P")
_R = TypeVar("_R")
Stamps = list[tuple[int, int] | None]  # (inode, mtime) of each directory, None: not there


class CheckpointRemovedError(MfsdpFailedError, ValueError):
    """The checkpoint went away while it was read, as a run saving with keep_last removes
    its old steps (exit 1: the read failed, nothing says the checkpoint is damaged)."""


def dir_stamps(paths: layout.CheckpointPaths) -> Stamps:
    """Identity and last change of the checkpoint's directories (step, dist_ckpt, HF files):
    removing or adding an entry in one changes its mtime, removing it its identity. None
    for one that cannot be looked at."""
    stamps: Stamps = []
    for directory in dict.fromkeys((paths.step_dir, paths.dist_ckpt, paths.hf_dir)):
        if directory is None:
            continue
        try:
            info = os.stat(directory)
        except OSError:
            stamps.append(None)
            continue
        stamps.append((info.st_ino, info.st_mtime_ns))
    return stamps


def refuse_if_removed(paths: layout.CheckpointPaths, stamps: Stamps) -> None:
    """CheckpointRemovedError when the checkpoint's directories are not as they were when
    the read began (`stamps`): nobody writes into a finished checkpoint, but a run saving
    with keep_last deletes its old steps."""
    if dir_stamps(paths) == stamps:
        return
    if paths.step_dir is not None and paths.step is not None:
        raise CheckpointRemovedError(
            f"{paths.step_dir}: step {paths.step} was removed while it was read (a run still"
            " saving with keep_last?); read it again"
        )
    raise changed_while_read(paths.dist_ckpt, "files removed or added")


def changed_while_read(path: str | os.PathLike[str], what: str) -> CheckpointRemovedError:
    """The line for a file or directory found changed part-way through a read (`what` says
    how): nobody writes into a finished checkpoint or model, so it is no damage of it."""
    return CheckpointRemovedError(
        f"{os.fsdecode(path)}: changed while it was read ({what}); read it again"
    )


def shrank_while_read(
    fd: int, needed: int, path: str | os.PathLike[str] | None = None
) -> CheckpointRemovedError:
    """`changed_while_read` for the open file `fd` at `path`, whose size was checked before
    its read but which ended before byte `needed`: it was truncated (or replaced) meanwhile.
    A reader holding only the descriptor (a kernel copy, a NaN/Inf scan) leaves out `path`:
    the file is named as the kernel knows it now ("... (deleted)" once removed)."""
    name = _open_file_name(fd) if path is None else path
    return changed_while_read(name, f"{os.fstat(fd).st_size} bytes now, {needed} needed")


def _open_file_name(fd: int) -> str:
    """The path of the open file `fd` (Linux's /proc/self/fd), else the descriptor's number."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return f"file descriptor {fd}"


def refuse_if_moved_on(run: Path, step: int | str) -> None:
    """CheckpointRemovedError when the tracker of `run`, which named `step` (missing now),
    names another step by now: a run saving meanwhile moved it on and removed `step`
    (keep_last), which is no damage of the run dir."""
    try:
        now = run_steps.read_tracker_text(run)
    except layout.DamagedRunDirError:
        return
    if now is not None and now != str(step):
        raise CheckpointRemovedError(
            f"{run / layout.TRACKER_FILE}: step {step} was removed while it was read (a run"
            f" still saving with keep_last? the tracker names step {now} now); read it again"
        )


def _nothing_to_compare() -> None:
    """What `removal_said` yields for a checkpoint it could not resolve (the block's own
    errors say what is wrong)."""


@contextlib.contextmanager
def removal_said(path: str | os.PathLike, role: str | None = None) -> Iterator[Callable[[], None]]:
    """Read the checkpoint at `path` (any level `resolve_checkpoint` reads) in the
    block: an error raised there becomes CheckpointRemovedError when the step was removed
    (or, when it went as it was resolved, the run dir's tracker moved on) meanwhile. It
    yields the same comparison, for a block whose result records what it could not read
    instead of raising. A URL, or a path that resolves to no checkpoint, is left to the
    block's own errors. The block resolves `path` to the step resolved here
    (`resolved_once`): resolved anew, a run dir saving meanwhile was read at its next step,
    while the removal was looked for at this one."""
    with checkpoint_resolution.resolved_once(), _removal_said(path, role) as compare:
        yield compare


@contextlib.contextmanager
def _removal_said(path: str | os.PathLike, role: str | None) -> Iterator[Callable[[], None]]:
    if is_url(str(path)):
        yield _nothing_to_compare
        return
    run = Path(path)
    tracked: str | None = None
    paths: layout.CheckpointPaths | None = None
    with contextlib.suppress(MfsdpError, OSError):  # the block says what is wrong
        tracked = run_steps.read_tracker_text(run) if run.is_dir() else None
        paths = checkpoint_resolution.resolve_checkpoint(run, role=role)
    if paths is not None:
        with removal_of(paths) as compare:
            yield compare
        return
    try:
        yield _nothing_to_compare
    except Exception:
        if tracked is not None:
            refuse_if_moved_on(run, tracked)
        raise


@contextlib.contextmanager
def removal_of(paths: layout.CheckpointPaths) -> Iterator[Callable[[], None]]:
    """Read the resolved checkpoint `paths` in the block: an error raised there becomes
    CheckpointRemovedError when its directories changed meanwhile (`refuse_if_removed`);
    the block gets that comparison to make itself, once its result shows a read it could
    not make."""
    stamps = dir_stamps(paths)
    try:
        yield lambda: refuse_if_removed(paths, stamps)
    except Exception:
        refuse_if_removed(paths, stamps)
        raise


def reads_checkpoint(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """`function`, whose first argument names a checkpoint and whose `role` keyword picks
    verl's role in it, run inside `removal_said`: its failure is the step's removal when
    the step went meanwhile."""
    return _guarded(function, None)


def describes_checkpoint(
    incomplete: Callable[[Any], bool],
) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """`reads_checkpoint` for a function that describes what it could not read instead of
    failing (`inspect`): a result that is `incomplete` counts as a failed read, so a step
    removed meanwhile is refused then too."""

    def decorate(function: Callable[_P, _R]) -> Callable[_P, _R]:
        return _guarded(function, incomplete)

    return decorate


def _guarded(
    function: Callable[_P, _R], incomplete: Callable[[Any], bool] | None
) -> Callable[_P, _R]:
    @functools.wraps(function)
    def guarded(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        path, role = args[0], kwargs.get("role")
        if not isinstance(path, (str, os.PathLike)):
            return function(*args, **kwargs)
        with removal_said(path, role if isinstance(role, str) else None) as refuse_if_gone:
            result = function(*args, **kwargs)
            if incomplete is not None and incomplete(result):
                refuse_if_gone()
            return result

    return guarded


__all__ = [
    "CheckpointRemovedError",
    "changed_while_read",
    "describes_checkpoint",
    "dir_stamps",
    "reads_checkpoint",
    "refuse_if_moved_on",
    "refuse_if_removed",
    "removal_of",
    "removal_said",
    "shrank_while_read",
]
