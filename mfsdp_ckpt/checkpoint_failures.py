"""What a failed save or load of the checkpointer raises, each as one line.

DCP turns every rank's exception into one CheckpointException whose message is a page of
tracebacks; a full disk surfaces as Python's `[Errno 28] ...: '/x'`; a Ctrl-C or memory
running out may arrive wrapped in either. Here each becomes what the CLI reports (the file
and the reason, the step and what resumes it), so that `checkpointer.py` keeps to the save
protocol.
"""

from __future__ import annotations

import contextlib
import errno
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from torch.distributed.checkpoint.api import CheckpointException

from mfsdp_ckpt.check.printable import MAX_ERROR_CHARS, error_line, printable, said_by
from mfsdp_ckpt.errors import MfsdpError, MfsdpFailedError
from mfsdp_ckpt.format import layout, run_steps
from mfsdp_ckpt.storage.file_errors import os_error_line
from mfsdp_ckpt.storage.tensor_memory import (
    TensorMemoryError,
    is_allocation_failure,
    memory_failure,
)


class CheckpointSaveError(MfsdpFailedError, RuntimeError):
    """A save failed (disk full, unwritable, a rank died); the previous checkpoint is intact."""


class TrackerNotUpdatedError(CheckpointSaveError):
    """A step was saved whole, but the tracker naming the newest step could not be replaced."""


class CheckpointReadError(MfsdpFailedError):
    """A checkpoint's file could not be read while a run loaded or resumed it (one line)."""


class CheckpointLoadError(MfsdpFailedError, RuntimeError):
    """DCP failed to read a checkpoint that passed validation (the message is one line)."""


def save_failure(err: BaseException, tmp: Path, step: int) -> BaseException:
    """What a failed save raises: KeyboardInterrupt for a Ctrl-C (DCP may have wrapped it),
    memory running out as that failure itself (DCP may have wrapped it too: `_memory_failure`),
    our own CheckpointSaveError as it is, a collective's RuntimeError (a peer went away: the
    CLI reports the rank that failed first) and SystemExit as they are; anything else (an
    OSError, DCP's gathered failures, a tokenizer's plain `Exception` on a full disk) as one
    CheckpointSaveError naming the temp dir `tmp` and the step, and the file as `PATH: reason`
    (`_cause_line`). Wrapped, memory read "saving step N failed: MemoryError": the CLI's
    out-of-memory line, with what frees enough for a run, is for it (`cli.errors`)."""
    if isinstance(err, KeyboardInterrupt) or _interrupted(err):
        return KeyboardInterrupt()
    memory = _memory_failure(err)
    if memory is not None:  # the machine ran out, not the step's files
        return memory
    if isinstance(err, CheckpointSaveError | RuntimeError) or not isinstance(
        err, Exception | CheckpointException
    ):
        return err
    if isinstance(err, CheckpointException):
        failure = CheckpointSaveError(f"{tmp}: saving step {step} failed: {_first_failure(err)}")
        failure.every_rank = True  # DCP raises the gathered failures on every rank
        return failure
    return CheckpointSaveError(f"{tmp}: saving step {step} failed: {_cause_line(err)}")


def tracker_failure(run_dir: Path, step: int, err: OSError) -> TrackerNotUpdatedError:
    """Step `step` is saved but the tracker could not be replaced (disk full): say so, and
    which step `checkpoint.resume=auto` takes now."""
    return TrackerNotUpdatedError(
        f"{run_dir / layout.TRACKER_FILE}: step {step} was saved in"
        f" {layout.step_dir(run_dir, step)}, but the tracker could not be updated"
        f" ({err.strerror or err}); {_resume_advice(run_dir, step)}"
    )


def load_failure(
    err: CheckpointException, dist_ckpt: Path, stored: Mapping[str, Any]
) -> TensorMemoryError | CheckpointLoadError:
    """What a failed DCP load raises: memory running out as one line naming what did not
    fit (`_out_of_memory`), anything else as CheckpointLoadError with the first rank's
    failure in one line."""
    failure: TensorMemoryError | CheckpointLoadError = (
        TensorMemoryError(_out_of_memory(dist_ckpt, stored))
        if _memory_failure(err) is not None
        else CheckpointLoadError(f"{dist_ckpt}: load failed: {_first_failure(err)}")
    )
    failure.every_rank = True  # DCP raises the gathered failures on every rank
    return failure


@contextlib.contextmanager
def raised_by_every_rank() -> Iterator[None]:
    """Mark an MfsdpError raised inside as every rank's (`MfsdpError.every_rank`), for checks
    each rank of a run makes alike on the same files (a resume's checkpoint, refused before
    DCP reads it): rank 0 says it once. Unmarked, each rank of `mfsdp train
    --nproc-per-node N` printed the same line, and the launcher a second JSON object. An
    OSError reading those files (a `.distcp` unreadable, EIO) becomes CheckpointReadError,
    marked alike, with the line the CLI says for an OSError (`os_error_line`). A rank that
    met either alone is still named by the launcher (`cli.torchrun._met_alike`)."""
    try:
        yield
    except MfsdpError as err:
        err.every_rank = True
        raise
    except OSError as err:  # the same file failing each rank (unreadable, EIO) is said once too
        if is_allocation_failure(err) or err.errno == errno.ENAMETOOLONG:
            raise  # the CLI's own lines for these are said once already
        failure = CheckpointReadError(os_error_line(err))
        failure.every_rank = True
        raise failure from err


def _resume_advice(run_dir: Path, saved: int) -> str:
    """How to resume from step `saved`, whose tracker update failed: `checkpoint.resume=auto`
    reads the tracker, which still names an older step, and refuses to train past the
    newer step kept beside it (it would save over it): its path is what continues the run."""
    resume = f"checkpoint.resume={layout.step_dir(run_dir, saved)}"
    try:
        tracked = run_steps.resume_step(run_dir)
    except (MfsdpError, OSError) as err:
        return f"give {resume} to continue from it (the tracker cannot be read: {err})"
    if tracked == saved:
        return "checkpoint.resume=auto resumes from it"
    named = "no step" if tracked is None else f"step {tracked}"
    return f"give {resume} to continue from it (checkpoint.resume=auto reads the tracker: {named})"


def _interrupted(err: BaseException) -> bool:
    """Whether DCP wrapped a KeyboardInterrupt (it turns every rank's exception into one)."""
    failures = err.failures.values() if isinstance(err, CheckpointException) else ()
    causes = [f[0] if isinstance(f, tuple) else f for f in failures]
    return any(isinstance(cause, KeyboardInterrupt) for cause in causes)


def _first_cause(err: CheckpointException) -> BaseException:
    """The first rank's exception (DCP carries each rank's with its traceback summary)."""
    first = next(iter(err.failures.values()), (err, None))
    return first[0] if isinstance(first, tuple) else first


def _memory_failure(err: BaseException) -> BaseException | None:
    """Memory running out in `err` (`memory_failure`), or for DCP's gathered failures in the
    first rank's exception, the one a failure of theirs is named by; None when it is not."""
    return memory_failure(_first_cause(err) if isinstance(err, CheckpointException) else err)


def _first_failure(err: CheckpointException) -> str:
    """The first rank's exception as one line (DCP's own message is a page of tracebacks)."""
    return _cause_line(_first_cause(err))


def _cause_line(cause: BaseException) -> str:
    """Why a save failed, in one line: an OSError as `PATH: reason` (`os_error_line`: the
    file it names and errno's words, never Python's `[Errno 28] ...: '/x'`), anything else
    (a bug's, a library's own error) as `Type: its first line` (`error_line`), or where that
    line is a heading (it ends in `:`) up to the first line that is not: huggingface_hub's
    validation errors say only which validator failed on their first line, and why below."""
    if isinstance(cause, OSError):
        return os_error_line(cause)
    lines = [line.strip() for line in said_by(cause).splitlines() if line.strip()]
    reason = next((n for n, line in enumerate(lines) if not line.endswith(":")), 0)
    if reason == 0:
        return error_line(cause)
    said = " ".join(lines[: reason + 1]) + (" ..." if len(lines) > reason + 1 else "")
    return f"{printable(type(cause).__name__)}: {printable(said, MAX_ERROR_CHARS)}"


def _out_of_memory(dist_ckpt: Path, stored: Mapping[str, Any]) -> str:
    """Loading ran out of memory: DCP reads each stored piece of a tensor whole before it
    copies it into the run's shard, so the largest piece bounds what a rank needs beyond the
    model and optimizer it already holds. Named, so the user knows what did not fit."""
    pieces = [
        (math.prod(chunk.sizes) * entry.properties.dtype.itemsize, key)
        for key, entry in stored.items()
        for chunk in getattr(entry, "chunks", ())
    ]
    largest = max(pieces, default=None)
    piece = (
        f"; its largest stored piece, of {largest[1]}, is {largest[0]} bytes"
        f" ({largest[0] / 2**30:.2f} GiB), read whole"
        if largest
        else ""
    )
    return (
        f"{dist_ckpt}: out of memory loading it{piece}; free memory or raise the process's"
        " limit (ulimit -v), or resume on a machine with more"
    )
