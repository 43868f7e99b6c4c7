"""Standard streams that exist, whatever the command was started with.

Started with stdout or stderr closed (`mfsdp ... >&- 2>&-`, a daemon or a job scheduler
that closes them), Python sets `sys.stdout`/`sys.stderr` to None: the first progress bar
or message raised AttributeError, so an export ended with exit 1 and no word anywhere.
Worse, the closed descriptor numbers are free, so the next file the command opens (a lock,
a checkpoint shard, an export's safetensors) becomes "stdout" or "stderr": a warning from
C++ code, or a launched rank's output, would be written into it. The convention daemons
follow fixes both: the missing descriptors are opened on /dev/null before anything else.

Stdout is opened there read-only: a command's result that cannot be written is a failure,
whether stdout is closed (`>&-`) or full (`>/dev/full`), not an exit 0 with the result lost.
Writing it fails with EBADF, in this process and in the ranks it starts (which inherit it),
and is said as a full stdout is (`stdout: cannot write the command's output`, exit 1).
The placeholders are inheritable: `os.open` makes descriptors close on exec (PEP 446), so
torchrun and the ranks of `--nproc-per-node N` started with 0, 1 and 2 closed again, a
rank's result line went nowhere at exit 0, and its files took those numbers. Each of those
entry points calls this too, for a launcher that closed them.
"""

from __future__ import annotations

import io
import os
import sys

from cli.checked_stdout import checked_text

# descriptor, stream, the stream's mode and how /dev/null is opened for it
_STREAMS = (
    (0, "stdin", "r", os.O_RDWR),
    (1, "stdout", "w", os.O_RDONLY),  # what is written fails: the result is not lost unsaid
    (2, "stderr", "w", os.O_RDWR),
)


def ensure_standard_streams() -> None:
    """Open /dev/null on each of descriptors 0, 1 and 2 that is closed, and give Python a
    stream on it: no file takes those numbers, stderr asked to go nowhere goes nowhere, and
    a write to a closed stdout fails (EBADF) as one to a full one does."""
    for fd, name, mode, flags in _STREAMS:
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        os.open(os.devnull, flags)  # the lowest free number: `fd`, as those below are open
        os.set_inheritable(fd, True)  # the processes it starts hold it as their own `fd`
        stream = (  # stdout's writes fail as those of a full one do (`cli.checked_stdout`)
            checked_text(fd)
            if name == "stdout"
            else io.TextIOWrapper(io.FileIO(fd, mode, closefd=False))
        )
        for attribute in (name, f"__{name}__"):
            if getattr(sys, attribute) is None:
                setattr(sys, attribute, stream)


__all__ = ["ensure_standard_streams"]
