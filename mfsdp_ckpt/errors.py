"""The root of every error mfsdp raises on purpose, importable without torch.

Two kinds carry the exit code users script against: `MfsdpUsageError` (2: what was asked
cannot be done as asked: a path that is not a checkpoint, a bad config key) and
`MfsdpFailedError` (1: the check or the run failed: a damaged checkpoint, a failed save).
The CLI catches `MfsdpError` in one place and maps it by kind; anything else is a bug in
mfsdp and keeps its traceback. Importing this module must stay cheap: `mfsdp --help` and
the commands that fail early never pay for torch.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import NoReturn

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class MfsdpError(Exception):
    """An error whose message is one line naming the file or key and what is wrong."""

    exit_code: int = EXIT_FAILED
    # Raised alike by every rank of a run (a save DCP failed on all of them): rank 0's line
    # says it, so the other ranks of `mfsdp train --nproc-per-node N` exit without theirs.
    every_rank: bool = False
    # The user's code it stopped left threads that may never end (a reward function waiting
    # on a worker thread past reward.timeout_s): the process exits without joining them.
    abandons_threads: bool = False


# How the CLI reports an error and ends the process (its line, --json's object, a launched
# rank's rules); set by the CLI, for errors no caller can catch (`report_stranded`).
_stranded_reporter: Callable[[MfsdpError], object] | None = None


def on_stranded_error(reporter: Callable[[MfsdpError], object]) -> None:
    """Make `reporter` report the errors `report_stranded` gets; it should end the process."""
    global _stranded_reporter
    _stranded_reporter = reporter


def report_stranded(err: MfsdpError) -> NoReturn:
    """Report `err` and end the process, from a thread other than the one that failed: a
    watchdog whose main thread is stuck in C code (a reward function in a bigint power) can
    neither raise there nor wait for it. Other threads are not joined."""
    if _stranded_reporter is not None:
        _stranded_reporter(err)
    sys.stderr.write(f"error: {err}\n")
    sys.stderr.flush()
    os._exit(err.exit_code)


class MfsdpUsageError(MfsdpError):
    """What was asked cannot be done as asked (exit 2)."""

    exit_code = EXIT_USAGE


class MfsdpFailedError(MfsdpError):
    """The check or the run failed (exit 1)."""

    exit_code = EXIT_FAILED


class CheckpointFormatError(MfsdpFailedError, ValueError):
    """The metadata describes something inconsistent; the message names the tensor."""


class UnsafeMetadataError(MfsdpFailedError, ValueError):
    """The `.metadata` file is not plain DCP metadata (it names a forbidden global, or is
    damaged)."""
