"""One writer per output path: an exclusive `flock` on `.<name>.out-lock` beside `<out>`.

Every command that writes a directory the user names (`export-hf`, `import-hf`, `data ...`)
holds it for the whole command, so a second run into the same `--out` stops at once instead
of interleaving its files with the first run's. `flock` belongs to the open file: the kernel
drops it when the holder dies, so a lock file a SIGKILLed run left behind is taken over by
the next run, never waited on. A holder that exits normally, fails or is stopped by Ctrl-C
removes the file on the way out.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

from mfsdp_ckpt.errors import MfsdpFailedError, MfsdpUsageError

LOCK_SUFFIX = ".out-lock"
NAME_MAX = 255  # bytes in one path component (Linux: ext4, xfs, btrfs, tmpfs, NFS)


class OutputBusyError(MfsdpFailedError, ValueError):
    """Another live process holds the output's lock (exit 1: the command as given is right
    and succeeds once the other is done, where exit 2 says to change the command)."""


class OutputNotWritableError(MfsdpUsageError, ValueError):
    """Nothing can be created beside the output (`/sys/x`, `/proc/x`, a read-only or missing
    parent, where root's permission bits say yes): the --out given is the wrong one."""


# How creating the lock file fails when the parent is no place for the output (exit 2);
# anything else (a full disk) is a failed run (exit 1).
_NOT_WRITABLE = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT, errno.ENOTDIR}


def cannot_create(option: str, out: str | os.PathLike, folder: Path, err: OSError) -> Exception:
    """The one line for a folder at or above `out` in which nothing could be created (the
    lock file beside it, a missing parent): it names the option and the folder, not the
    hidden lock file; bad usage (exit 2) where the folder is no place for output. The
    folder is named as `out` names it (`small` for `small/run`), as every error names a
    path the user gave (`as_given`)."""
    shown = as_given(folder, out)
    message = f"{option} {out}: cannot create files in {shown} ({err.strerror or err})"
    if err.errno in _NOT_WRITABLE:
        return OutputNotWritableError(f"{message}; choose another {option}")
    return MfsdpFailedError(message)


def as_given(folder: Path, out: str | os.PathLike) -> str | os.PathLike:
    """`folder`, found at or above the output `out`, as the user's `out` names it: the part
    of a relative `out` that leads to it (`small` of `small/run`, `.` of `run`), matched
    through links the way the lock file found it; where none does (an absolute `out`, a
    link leading elsewhere), `folder` as it is."""
    if os.path.isabs(out):
        return folder
    real = os.path.realpath(folder)
    for part in Path(out).parents:
        if os.path.realpath(part) == real:
            return part
    return folder


def _open_lock_file(lock_path: Path, out: str | os.PathLike, option: str) -> int:
    """The lock file's descriptor; `cannot_create` when it cannot be created (was a raw
    `[Errno 13] Permission denied: '/sys/.x.out-lock'`)."""
    try:
        return os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as err:
        raise cannot_create(option, out, lock_path.parent, err) from None


def hidden_name(name: str, tag: str, room: int = 0) -> str:
    """`.{name}{tag}`, the hidden file or folder kept beside `name` (its lock, its work dir),
    with `room` bytes left for what the caller appends (a pid). A `name` near NAME_MAX is a
    legal --out, but this longer name was not, and the command refused it: then the name is
    cut to fit and marked with 8 hex digits of its hash, so two long names that start alike
    still get two different files."""
    whole = f".{name}{tag}"
    if len(os.fsencode(whole)) + room <= NAME_MAX:
        return whole
    digest = hashlib.sha256(os.fsencode(name)).hexdigest()[:8]
    keep = NAME_MAX - room - len(f".~{digest}{tag}".encode())
    head = os.fsencode(name)[:keep].decode(errors="ignore")  # no character cut in two
    return f".{head}~{digest}{tag}"


def lock_path_for(out: Path) -> Path:
    """The lock file of `out` where it really is: a run dir reached through a symlink, or
    through a linked parent, has one lock whatever path names it (a second training through
    a link to a busy run dir took its own lock and wrote checkpoints into the same steps).
    A link whose target's folder does not exist, is not writable (`runs/x -> /scratch/me`,
    where /scratch is the system's) or that leads to the root (no folder is beside it), keeps
    the path as given: its lock then sits beside the link, as before."""
    real = Path(os.path.realpath(out))
    usable = real.name and real.parent.is_dir() and os.access(real.parent, os.W_OK | os.X_OK)
    where = real if usable else Path(os.path.abspath(out))
    return where.with_name(hidden_name(where.name, LOCK_SUFFIX))


def acquire_out_lock(
    out: Path, option: str = "--out", given: str | os.PathLike | None = None
) -> int:
    """The open, locked descriptor of `out`'s lock file, or OutputBusyError naming `out` as
    the user gave it (`given`, relative where it was; None: `out`) and the holder's pid. The
    inode check makes a lock file that a finishing holder unlinked between our open and our
    flock count as not held."""
    lock_path = lock_path_for(out)
    shown = out if given is None else given
    while True:
        fd = _open_lock_file(lock_path, shown, option)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise OutputBusyError(
                f"{shown}: another command is writing it (pid {owner});"
                f" wait for it or choose another {option}"
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.lstat(lock_path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            _write_owner(fd, lock_path, out, option, shown)
            return fd
        os.close(fd)


def _write_owner(
    fd: int, lock_path: Path, out: Path, option: str, shown: str | os.PathLike
) -> None:
    """Write our pid into the lock file we hold (what a second command's busy error names).
    On failure (a full disk) the lock is dropped and its file removed, and the error names
    `out` as `shown` and its folder (was a bare `[Errno 28] No space left on device`)."""
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError as err:
        release_out_lock(out, fd)
        raise cannot_create(option, shown, lock_path.parent, err) from None


def release_out_lock(out: Path, fd: int) -> None:
    """Remove the lock file while still holding it (nobody can lock that inode after), then
    drop the lock."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(lock_path_for(out))
    os.close(fd)


@contextlib.contextmanager
def ctrl_c_deferred() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT), SIGTERM, SIGHUP, SIGQUIT and SIGUSR1 back for the block; one
    arriving meanwhile is acted on right after.

    Taking and dropping the lock are several system calls (open, flock, write; unlink,
    close): a KeyboardInterrupt between two of them would leave a lock file nobody removes.
    Callers bind what they took inside the block and release it in a `finally` around it.
    The handlers are swapped rather than the signals blocked: Python runs handlers in the
    main thread whichever thread the kernel hands the signal to, while a blocked mask holds
    for one thread only (torch and pyarrow start others). Off the main thread, where
    handlers cannot be set and KeyboardInterrupt is never raised, the block just runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    previous = {
        number: signal.signal(number, lambda got, _frame: arrived.append(got))
        for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1)
    }
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        for got in dict.fromkeys(arrived):
            handler = previous[signal.Signals(got)]
            if callable(handler):  # Python's SIGINT handler (and mfsdp's SIGTERM one) raises
                handler(got, None)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(got)


@contextlib.contextmanager
def out_lock(out: str | os.PathLike, option: str = "--out") -> Iterator[None]:
    """Hold `out`'s lock for the `with` block (see the module docstring); Ctrl-C at any
    moment leaves no lock file behind.

    >>> with out_lock("data/gsm8k"):
    ...     write_tables(...)
    """
    path = Path(os.path.abspath(out))
    if not path.name:  # `/`, `/tmp/..`: no folder is beside the root to hold a lock
        raise OutputNotWritableError(f"{option} {out}: the root directory; name a folder")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd: int | None = None
    try:
        with ctrl_c_deferred():  # a Ctrl-C meanwhile is raised inside the try, fd bound
            fd = acquire_out_lock(path, option, given=out)
        yield
    finally:
        if fd is not None:
            with ctrl_c_deferred():
                release_out_lock(path, fd)
