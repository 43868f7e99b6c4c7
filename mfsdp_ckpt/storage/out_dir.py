"""Claim an output directory exclusively, build it hidden, publish it without replacing
anything this command did not mean to replace.

What a command that writes a directory (`export-hf`, `import-hf`) needs, in one place:

* one writer per output: `out_lock.py`'s lock beside `<out>`, held for the whole command,
  so a second concurrent run into the same `<out>` is refused instead of silently
  replacing the first one's result;
* the missing parents of `<out>` made first, as `mkdir -p` (and as `mfsdp data --out` and
  transformers' `save_pretrained` do): `--out ckpts/q05` on a fresh machine must not need a
  separate mkdir. Those it made are removed again when the command fails, so a failure
  leaves nothing behind;
* a hidden work directory `.<name>.export-tmp-<pid>` next to `<out>` (same filesystem, so
  publishing is one rename; a name near the length limit is cut and marked with a hash,
  `out_lock.hidden_name`). Work directories of ours that a killed run left behind are
  removed by the next run into the same `<out>`, once it holds the lock (no live owner
  can then exist);
* publishing with `renameat2(RENAME_NOREPLACE)`: a directory someone else created at
  `<out>` meanwhile is never replaced. With `overwrite`, only the directory that was at
  `<out>` when the command started is replaced, and only when it is empty or what this
  command wrote there before (`replaceable`; by default a previous model export,
  config.json plus safetensors marked as an export's, nothing of a checkpoint): the two are
  swapped atomically with `RENAME_EXCHANGE`, the identity of what was swapped out is
  checked (swapped back if it is not the original), then it is deleted. At every instant
  `<out>` holds one whole version. One this user cannot delete (read-only) is refused
  before any work; one that still cannot be deleted once swapped out (its permissions
  changed meanwhile) leaves the command a success with a warning line naming it, and every
  later run into `<out>` tries again, warning while it stays.

Where `renameat2` is missing (not Linux, old libc, a filesystem without it), publishing
falls back to `mkdir(<out>)` (fails if anything is there) and renaming onto that empty
directory of our own, which the kernel refuses if it is no longer empty.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import re
import stat
from collections.abc import Callable, Collection
from pathlib import Path

from mfsdp_ckpt.check.printable import first_of
from mfsdp_ckpt.errors import MfsdpUsageError
from mfsdp_ckpt.format.layout import (
    DCP_METADATA_FILE,
    DIST_CKPT_DIR,
    MANIFEST_FILE,
    STEP_DIR_PREFIX,
    TRACKER_FILE,
)
from mfsdp_ckpt.format.model_files import (
    ADAPTER_CONFIG_FILE,
    ADAPTER_WEIGHTS_FILE,
    HF_CONFIG_FILE,
    INDEX_FILE,
    is_export_file,
)
from mfsdp_ckpt.format.step_saving import fsync_path
from mfsdp_ckpt.storage.file_errors import NOT_ABOUT_THE_FILE, in_work_dir
from mfsdp_ckpt.storage.out_lock import (
    acquire_out_lock,
    ctrl_c_deferred,
    hidden_name,
    release_out_lock,
)
from mfsdp_ckpt.storage.safetensors_writer import SINGLE_FILE, carries_export_mark
from mfsdp_ckpt.storage.tree_removal import failure_words, remove_tree, unremovable_dir
from mfsdp_ckpt.storage.writable import not_a_directory

log = logging.getLogger(__name__)  # a directory left behind: one warning line

_WORK_TAG = ".export-"
_PID_ROOM = len("old-4194304")  # what follows _WORK_TAG: tmp-/old- and a pid (Linux's largest)
# Checkpoint pieces that --overwrite must never delete.
_CHECKPOINT_MARKERS = (DCP_METADATA_FILE, DIST_CKPT_DIR, MANIFEST_FILE, TRACKER_FILE)
# What marks a directory as an export: a model's, or a PEFT adapter's (--adapter-only).
_EXPORT_SIGNATURES = (
    (HF_CONFIG_FILE, SINGLE_FILE),
    (HF_CONFIG_FILE, INDEX_FILE),
    (ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE),
)
_RENAME_NOREPLACE, _RENAME_EXCHANGE = 1, 2
# Why --overwrite may not replace the directory at a path (None: it may), phrased to be
# followed by "; --overwrite replaces only those" (`unreplaceable`).
Replaceable = Callable[[Path], str | None]


class OutputDirError(MfsdpUsageError, ValueError):
    """The output path cannot be claimed or published as asked (bad usage: exit 2)."""


# --------------------------------------------------------------------------- renames
def _renameat2(src: Path, dst: Path, flags: int) -> None:
    """renameat2(2) through libc; OSError(ENOSYS) where it is not available."""
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        raise OSError(errno.ENOSYS, "renameat2 is not available") from None
    function.argtypes = (
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    )
    at_fdcwd = -100
    if function(at_fdcwd, os.fsencode(src), at_fdcwd, os.fsencode(dst), flags) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(dst))


def _unsupported(err: OSError) -> bool:
    return err.errno in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP)


def rename_noreplace(src: Path, dst: Path) -> None:
    """Rename `src` to `dst`; FileExistsError when anything is at `dst` (never replaced)."""
    try:
        _renameat2(src, dst, _RENAME_NOREPLACE)
        return
    except OSError as err:
        if not _unsupported(err):
            raise
    os.mkdir(dst)  # FileExistsError when taken; from here `dst` is an empty dir of ours
    try:
        os.rename(src, dst)  # onto an empty directory only: ENOTEMPTY if someone wrote into it
    except OSError:
        with contextlib.suppress(OSError):
            os.rmdir(dst)
        raise


def exchange(first: Path, second: Path) -> bool:
    """Swap two existing paths atomically; False where the system cannot (nothing moved)."""
    try:
        _renameat2(first, second, _RENAME_EXCHANGE)
    except OSError as err:
        if _unsupported(err):
            return False
        raise
    return True


# --------------------------------------------------------------------------- claim
def as_given(path: Path, absolute: Path, given: Path) -> Path:
    """`path` named for a message as the user named the output: relative where `given` (the
    --out as typed, `absolute` as `checked_target` made it) was, as README promises, so
    `--out hf` is said as `hf`, a parent of it as `.` and a work dir beside it as
    `.hf.export-tmp-PID`. A path outside what `given` reaches, or any path where `given`
    was absolute, is said as it is."""
    if given.is_absolute():
        return path
    for up, base in enumerate([absolute, *absolute.parents][: len(given.parts) + 1]):
        if path == base or base in path.parents:
            start = os.path.normpath(os.path.join(given, *[os.pardir] * up))
            return Path(start) / path.relative_to(base)
    return path


def checked_target(out: Path) -> Path:
    """`out` made absolute (not resolved: a symlink must stay visible), or OutputDirError for
    paths no command may create or replace: `.`, `..`, `/`, the current directory or one
    above it, a symlink, a file, a mount point, a parent path that holds a file or a
    dangling link.

    A mount point (a container's `-v host:/out`) cannot be renamed or swapped: an output
    built beside it and published there failed with EBUSY once all of it was written (hours,
    for a large model), onto the parent's filesystem."""
    absolute = Path(os.path.abspath(out))
    if absolute.name in ("", ".", "..") or absolute == Path(absolute.anchor):
        raise OutputDirError(f"{out}: not a name an output can be created at; name a new directory")
    try:
        cwd = Path.cwd().resolve()
        if absolute.resolve() == cwd or absolute.resolve() in cwd.parents:
            raise OutputDirError(f"{out}: is the current directory or above it; name a new one")
    except OSError:
        pass
    if absolute.is_symlink() and not absolute.exists():
        raise OutputDirError(f"{out}: {not_a_directory(out)}")
    if absolute.is_symlink():
        raise OutputDirError(f"{out}: is a symlink; give the real path (links are not replaced)")
    if absolute.exists() and not absolute.is_dir():
        raise OutputDirError(f"{out}: exists and is not a directory")
    if os.path.ismount(absolute):
        raise OutputDirError(
            f"{out}: is a mount point, which cannot be replaced; name a new directory inside it"
            f" (e.g. {os.path.join(out, 'model')})"
        )
    for parent in absolute.parents:
        if os.path.lexists(parent):
            if not parent.is_dir():
                raise OutputDirError(f"{out}: {not_a_directory(as_given(parent, absolute, out))}")
            break
    return absolute


def make_parents(out: Path, given: Path | None = None) -> list[Path]:
    """Create the missing parents of `out`, outermost first; the ones this call made. An
    error names `out` as `given` (`as_given`; None: as `out`)."""
    missing = []
    for parent in out.parents:
        if os.path.isdir(parent):
            break
        missing.append(parent)
    made: list[Path] = []
    try:
        for parent in reversed(missing):
            try:
                os.mkdir(parent)
            except FileExistsError:  # made meanwhile by another command: not ours to remove
                if not os.path.isdir(parent):
                    shown = as_given(parent, out, given or out)
                    raise OutputDirError(f"{given or out}: {not_a_directory(shown)}") from None
                continue
            made.append(parent)
    except BaseException:
        remove_empty(made)
        raise
    return made


def remove_empty(made: list[Path]) -> None:
    """Remove the directories in `made` (outermost first), innermost first, while empty:
    one another command wrote into meanwhile stays (rmdir refuses it)."""
    for parent in reversed(made):
        try:
            os.rmdir(parent)
        except OSError:
            return


def replaceable_problem(path: Path, writes: Collection[str] = ()) -> str | None:
    """Why --overwrite may not replace the directory at `path`, or None when it may: it is
    empty, or it is a previous export (a model's config.json and safetensors, or a PEFT
    adapter's, and nothing but what an export writes: `model_files.is_export_file`), whose
    every top-level safetensors carries the mark the export's writer puts in its header
    (`carries_export_mark`). Anything else is someone's data, never deleted: a model repo
    cloned with its `.git/`, README and eval results, given as --out by a slip, lost all of
    them to an export; a bare model dir (a download, the run's own base model) looks like an
    export by its files alone, and was replaced by one.
    `writes`: the names this command writes at the top of its output besides those (the
    files an export copies whole from its checkpoint's own HF dir: a README, custom code,
    verl's `adapter/`), so that it can replace what it wrote before."""
    try:
        entries = {entry.name for entry in os.scandir(path)}
    except OSError as err:
        return f"cannot be listed ({err.strerror})"
    if not entries:
        return None
    marks = sorted(entries.intersection(_CHECKPOINT_MARKERS)) + sorted(
        name for name in entries if name.startswith(STEP_DIR_PREFIX)
    )
    if marks:
        return f"holds a checkpoint ({marks[0]})"
    if not any(set(files) <= entries for files in _EXPORT_SIGNATURES):
        return (
            "is not a model export (no config.json with model*.safetensors, nor"
            " adapter_config.json with adapter_model.safetensors) and not empty"
        )
    foreign = sorted(
        name for name in entries if name not in writes and not _written_by_export(path, name)
    )
    if foreign:
        return f"holds what no export writes ({first_of(foreign, 3)})"
    unmarked = sorted(
        name
        for name in entries
        if name.endswith(".safetensors") and not carries_export_mark(path / name)
    )
    if unmarked:
        return (
            f"holds a Hugging Face model mfsdp export-hf did not write ({unmarked[0]} carries"
            " no export mark; nor do exports made before 2026-12-06)"
        )
    return None


def unreplaceable(given: str | os.PathLike, problem: str) -> OutputDirError:
    """The one line refusing to replace the directory `given` for `problem` (a
    `Replaceable`'s words)."""
    return OutputDirError(
        f"{given}: {problem}; --overwrite replaces only those, remove it yourself"
    )


def _written_by_export(directory: Path, name: str) -> bool:
    """`name` in `directory` is a regular file an export writes, or its chat templates dir
    holding only such files."""
    path = directory / name
    if path.is_symlink():
        return False
    if path.is_dir():
        try:
            inner = list(os.scandir(path))
        except OSError:
            return False
        return all(
            entry.is_file(follow_symlinks=False) and is_export_file(f"{name}/{entry.name}")
            for entry in inner
        )
    return path.is_file() and is_export_file(name)


class OutputClaim:
    """An exclusive claim on one output path: write into `.tmp`, then `publish()`.

    Use it as a context manager; leaving it without `publish()` (an error, Ctrl-C) removes
    the work directory, and leaving it always releases the lock and its file. `out` is
    absolute (`checked_target`); messages name paths as `given` names them (`as_given`).
    `replaceable` judges what --overwrite may replace (None: `replaceable_problem`, an
    export's rule, with `writes`)."""

    def __init__(
        self,
        out: Path,
        overwrite: bool,
        writes: Collection[str] = (),
        given: Path | None = None,
        replaceable: Replaceable | None = None,
    ):
        self.out = out
        self.given = given or out
        self.overwrite = overwrite
        self.writes = frozenset(writes)
        self.replaceable = replaceable or (lambda path: replaceable_problem(path, self.writes))
        self._work_prefix = hidden_name(out.name, _WORK_TAG, _PID_ROOM)
        self.tmp = out.with_name(f"{self._work_prefix}tmp-{os.getpid()}")
        self._lock_fd: int | None = None
        self._original: tuple[int, int] | None = None  # (st_dev, st_ino) --overwrite may replace
        self._made_parents: list[Path] = []
        self.published = False

    # ---------------------------------------------------------------- lifecycle
    def acquire(self) -> OutputClaim:
        try:
            self._made_parents = make_parents(self.out, self.given)
            self._lock()
            self._remove_stale_work_dirs()
            self._original = self._existing_target()
            os.mkdir(self.tmp)
        except BaseException:
            self._unlock()
            self._remove_made_parents()
            raise
        return self

    def __enter__(self) -> OutputClaim:
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        self.release()
        if isinstance(exc, OSError) and exc.errno is not None:
            raise self._naming_out(exc) from None

    def _naming_out(self, err: OSError) -> OSError:
        """`err` as it reads against `out`: the one error line must say which --out failed.
        A write that failed on a file in the hidden work dir, which `release` just removed,
        says so (`in_work_dir`): named at `out` it was a file that never existed. One that
        names the work dir itself, or no file at all (pwrite, fsync), is said at `out`. An
        error of the process (out of memory, too many open files) names none: it is not
        about --out."""
        err = in_work_dir(err, self.tmp)
        said = err.strerror or str(err)
        named = str(self.tmp) in said or str(self.out) in said
        text = said.replace(str(self.tmp), str(self.given))
        name = (
            self._shown(str(err.filename).replace(str(self.tmp), str(self.out)))
            if err.filename
            else None
        )
        if name is None and not named and err.errno not in NOT_ABOUT_THE_FILE:
            name = str(self.given)
        return OSError(err.errno, text, name) if name else OSError(err.errno, text)

    def release(self) -> None:
        """Remove the work directory (unless published) and drop the lock."""
        if self._lock_fd is None:
            return
        if not self.published:
            self._remove(self.tmp, "this command's unfinished work dir")
        self._unlock()
        if not self.published:
            self._remove_made_parents()

    def _remove_made_parents(self) -> None:
        """The parents `acquire` made, while empty: a failed command leaves nothing behind."""
        remove_empty(self._made_parents)
        self._made_parents = []

    def publish(self) -> None:
        """Move the finished work directory to `out`; OutputDirError (work dir removed by
        `release`) when `out` is not what this command may replace."""
        fsync_path(self.tmp)
        if self._original is None:
            try:
                rename_noreplace(self.tmp, self.out)
            except (FileExistsError, IsADirectoryError, NotADirectoryError) as err:
                raise self._appeared() from err
            except OSError as err:
                if err.errno in (errno.EEXIST, errno.ENOTEMPTY):
                    raise self._appeared() from None
                raise
        else:
            self._replace_original()
        self.published = True
        fsync_path(self.out.parent)

    def publish_synced(self) -> None:
        """`publish`, after every file and folder in the work directory is fsynced: for
        writers that leave their files unsynced (the LoRA exports' safetensors), so what
        appears at `out` survives a power cut."""
        for path in sorted(self.tmp.rglob("*")):
            fsync_path(path)
        self.publish()

    # ---------------------------------------------------------------- internals
    def _shown(self, path: str | os.PathLike) -> str:
        """`path` as a message names it (`as_given`)."""
        return str(as_given(Path(path), self.out, self.given))

    def _appeared(self) -> OutputDirError:
        return OutputDirError(
            f"{self.given}: appeared while this command ran; left as it is, nothing written"
        )

    def _existing_target(self) -> tuple[int, int] | None:
        try:
            info = os.lstat(self.out)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
            raise OutputDirError(f"{self.given}: exists and is not a directory")
        if not self.overwrite:
            raise OutputDirError(f"{self.given}: already exists (pass --overwrite to replace it)")
        problem = self.replaceable(self.out)
        if problem:
            raise unreplaceable(self.given, problem)
        blocked = unremovable_dir(self.out)
        if blocked is not None:
            shown = self._shown(blocked)
            place = "its entries" if blocked == self.out else f"the entries of {shown}"
            raise OutputDirError(
                f"{self.given}: --overwrite cannot delete it: this user may not remove {place}"
                f" (that needs read, write and search permission: chmod u+rwx {shown});"
                " nothing was written"
            )
        return info.st_dev, info.st_ino

    def _replace_original(self) -> None:
        """Swap the new directory in; the old one (now at `.tmp`) must be the original."""
        try:
            swapped = exchange(self.tmp, self.out)
        except FileNotFoundError:  # the original went away meanwhile: publish into the gap
            self._original = None
            self.publish()
            return
        if not swapped:
            aside = self.out.with_name(f"{self._work_prefix}old-{os.getpid()}")
            if not self._is_original(self.out):
                raise self._changed()
            os.rename(self.out, aside)
            rename_noreplace(self.tmp, self.out)
            self._remove(aside, f"the earlier {self.out.name} this command replaced")
            return
        if not self._is_original(self.tmp):  # someone put another directory there: undo
            exchange(self.tmp, self.out)
            raise self._changed()
        self._remove(self.tmp, f"the earlier {self.out.name} this command replaced")

    def _changed(self) -> OutputDirError:
        return OutputDirError(
            f"{self.given}: was replaced by something else while this command ran; left as it is"
        )

    def _is_original(self, path: Path) -> bool:
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return False
        return (info.st_dev, info.st_ino) == self._original

    def _lock(self) -> None:
        with ctrl_c_deferred():  # raised once self._lock_fd is bound, so release() sees it
            self._lock_fd = acquire_out_lock(self.out, given=self.given)

    def _unlock(self) -> None:
        with ctrl_c_deferred():
            if self._lock_fd is not None:
                release_out_lock(self.out, self._lock_fd)
                self._lock_fd = None

    def _remove_stale_work_dirs(self) -> None:
        """Work dirs of earlier runs into this `out` (ours by name; with the lock held no
        live owner exists). Also the random-suffix names earlier versions used."""
        pattern = re.compile(rf"{re.escape(self._work_prefix)}(?:(?:tmp|old)-\d+|[a-z0-9_]{{8}})")
        for entry in os.scandir(self.out.parent):
            if pattern.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False):
                self._remove(Path(entry.path), f"left by an earlier command into {self.out.name}")

    def _remove(self, path: Path, what: str) -> None:
        """Remove a directory of ours; one that cannot be removed is a warning line naming it
        and the file that failed (never an error: what the command made is in place, or its
        error says what failed), and the next command into `out` tries again."""
        failed = remove_tree(path)
        if failed is not None:
            log.warning(
                "warning: %s: %s, not removed (%s); the next command into %s tries again, or"
                " remove it yourself",
                self._shown(path),
                what,
                failure_words(failed),
                self.given,
            )


def claim_output(
    out: str | os.PathLike,
    overwrite: bool = False,
    writes: Collection[str] = (),
    replaceable: Replaceable | None = None,
) -> OutputClaim:
    """Claim `out` for this process, or OutputDirError (one line) saying why not.
    `replaceable`: what --overwrite may replace, where it is not an export's rule
    (`replaceable_problem`).

    >>> with claim_output("hf/model", overwrite=False) as claim:
    ...     (claim.tmp / "config.json").write_text("{}")
    ...     claim.publish()
    """
    given = Path(out)
    return OutputClaim(checked_target(given), overwrite, writes, given, replaceable).acquire()


__all__ = [
    "OutputClaim",
    "OutputDirError",
    "Replaceable",
    "as_given",
    "checked_target",
    "claim_output",
    "exchange",
    "make_parents",
    "remove_empty",
    "rename_noreplace",
    "replaceable_problem",
    "unreplaceable",
]
