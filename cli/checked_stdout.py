"""Stdout whose every write is checked: all of it written, or an error.

Python's own stdout drops a short write. On a disk that fills mid-write (a quota, a file
size limit), write(2) puts out what fits and returns that count; CPython's BufferedWriter
hands the short count back without raising, and TextIOWrapper, so `click.echo` and
`print`, ignores it. `mfsdp ckpt inspect RUN --json > out.json` left 12 KiB of a 27 KiB
object there, cut inside a string, with exit 0 and nothing on stderr, while `>/dev/full`
(a first write that fails) said `stdout: cannot write the command's output`. A command's
result is its stdout, so in a process that ends with its command every write to stdout
goes through `CheckedStdout`: it loops on os.write until all is out, and a write that
fails (ENOSPC, EFBIG past a file size limit, EBADF on a closed stdout) or puts out nothing
raises OSError from `CheckedStdout.write`, which `cli.errors.stdout_failure` says as that
line, exit 1; a reader gone (EPIPE) is still BrokenPipeError: exit 141, as Unix tools end.
"""

from __future__ import annotations

import errno
import io
import os
import select
import sys
from typing import Any, TextIO


class DescriptorStream(io.RawIOBase):
    """A raw, writable stream on descriptor `fd`, for a subclass's own `write`: what
    io.TextIOWrapper asks of the stream under it besides writing."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)


class CheckedStdout(DescriptorStream):
    """Descriptor `fd` (stdout) written in full by every write, or an OSError raised here."""

    def write(self, data: Any) -> int:
        """Write all of `data`; its length. A short write is followed by the rest, so a
        disk that filled says so with the next one (ENOSPC, EFBIG)."""
        left = memoryview(data).cast("B")
        size = left.nbytes
        while left:
            try:  # an OSError (EPIPE too) is raised from this frame: `stdout_failure`
                written = os.write(self._fd, left)
            except BlockingIOError:  # a non-blocking pipe or terminal that is busy: wait
                select.select([], [self._fd], [])
                continue
            if not written:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            left = left[written:]
        return size


def checked_text(fd: int, encoding: str | None = None, errors: str | None = None) -> TextIO:
    """A text stream on `fd` through `CheckedStdout`. Written through, with no BufferedWriter
    between: one keeps what it handed to a write that a signal's exception cut short, and
    writes it again at the next flush (bytes of the result twice); and what it drops of a
    short write is what this module exists to catch."""
    checked: Any = CheckedStdout(fd)  # a raw stream: typeshed asks for a buffered one
    return io.TextIOWrapper(
        checked,
        encoding=encoding,
        errors=errors,
        line_buffering=True,
        write_through=True,
    )


def guard_stdout() -> None:
    """Make sys.stdout checked (`CheckedStdout`) for every writer in this process:
    click.echo, print and `cli.lines.say` all write through it. Left alone where sys.stdout
    is not this process's own (a caller capturing it), has no descriptor, or is checked."""
    stream = sys.stdout
    if stream is not sys.__stdout__ or stream is None:
        return
    if isinstance(getattr(stream, "buffer", None), CheckedStdout):
        return
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return
    stream.flush()  # nothing is written yet where this is called: the command starts
    sys.stdout = checked_text(fd, stream.encoding, stream.errors)


__all__ = ["CheckedStdout", "checked_text", "guard_stdout"]
