"""Standard streams that exist, whatever the command was started with.

Started with stdout or stderr closed (`mfsdp ... >&- 2>&-`, a daemon or a job scheduler
that closes them), Python sets `sys.stdout`/`sys.stderr` to None: the first progress bar
or message raised AttributeError, so an export ended with exit 1 and no word anywhere.
Worse, the closed descriptor numbers are free, so the next file the command opens (a lock,
a checkpoint shard, an export's safetensors) becomes "stdout" or "stderr": a warning from
C++ code, or a launched rank's output, would be written into it. The convention daemons
follow fixes both: the missing descriptors are opened on /dev/null before anything else.
"""

from __future__ import annotations

import io
import os
import sys

_STREAMS = ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w"))


def ensure_standard_streams() -> None:
    """Open /dev/null on each of descriptors 0, 1 and 2 that is closed, and give Python a
    stream on it: output asked to go nowhere goes nowhere, and no file takes those numbers."""
    for fd, name, mode in _STREAMS:
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        os.open(os.devnull, os.O_RDWR)  # the lowest free number: `fd`, as those below are open
        stream = io.TextIOWrapper(io.FileIO(fd, mode, closefd=False))
        for attribute in (name, f"__{name}__"):
            if getattr(sys, attribute) is None:
                setattr(sys, attribute, stream)


__all__ = ["ensure_standard_streams"]
