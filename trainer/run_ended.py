"""The line a run ends with when the machine fails it (a save that failed, the metrics log on
a full disk): what failed, then the checkpoint the next run resumes from and how.

A rank killed mid-run ended with "the newest checkpoint is RUN/global_step_N: run the same
command again to resume from it", but a full disk ended the run with
`RUN/metrics.jsonl: No space left on device` alone, and the user had to find the step to go
on from by listing the run dir. Every failure that ends a run this way now says both.

`resume_words` and `newest_checkpoint` are torch-free: the launching process of a
`--nproc-per-node N` run words its Ctrl-C line with them, and importing torch there (for the
checkpointer's errors, which only `run_ended` needs) held that line back for tens of seconds.
"""

from __future__ import annotations

import errno
import os

from mfsdp_ckpt.errors import MfsdpError, MfsdpFailedError
from mfsdp_ckpt.format import layout, run_steps
from mfsdp_ckpt.storage.file_errors import os_error_line

# An OSError of these is no file failing the run: memory (the CLI's out-of-memory line says
# what frees enough) and a closed stdout (ends quietly, as a Unix tool does)
_NOT_THE_DISK = {errno.ENOMEM, errno.EPIPE}


class RunEndedError(MfsdpFailedError):
    """A failure of the machine that ended a run, with where the next run resumes (exit 1)."""


def resume_words(resume: str, every_machine: bool = False) -> str:
    """How a stopped run of `checkpoint.resume=resume` goes on from its newest checkpoint;
    `every_machine`: a run across several machines, which resumes only once each machine's
    command is started again (the survivors' ranks were stopped too)."""
    if every_machine:
        again = "start every machine's command again"
        return again if resume == "auto" else f"{again} with checkpoint.resume=auto"
    if resume == "auto":
        return "run the same command again"
    return "run it again with checkpoint.resume=auto"


def newest_checkpoint(run_dir: str | os.PathLike, resume: str) -> str:
    """`the newest checkpoint is RUN/global_step_N: run the same command again to resume
    from it` (as `checkpoint.resume=auto` finds it), `no checkpoint was saved in RUN yet`, or
    "" when the run dir cannot say (a damaged tracker: the next run says so itself)."""
    try:
        step = run_steps.resume_step(run_dir)
    except (MfsdpError, OSError):
        return ""
    if step is None:
        return f"no checkpoint was saved in {run_dir} yet"
    return (
        f"the newest checkpoint is {layout.step_dir(run_dir, step)}: "
        f"{resume_words(resume)} to resume from it"
    )


def run_ended(err: BaseException, run_dir: str | os.PathLike, resume: str) -> RunEndedError | None:
    """`err`'s line with `newest_checkpoint` after it, for a failed save or a file the run
    could not write (a full disk, a quota, a read-only remount), unless the next run would be
    refused for what stands in the run dir (`_refused_by_next_run`); None for anything else,
    which says itself (an interrupt, a rank gone, memory, a bug), and for a tracker not
    updated, whose line already says how to resume. Ask once an async save in flight has
    settled: the checkpoint it commits is the newest."""
    from mfsdp_ckpt.checkpoint_failures import CheckpointSaveError, TrackerNotUpdatedError

    if isinstance(err, TrackerNotUpdatedError):
        return None
    if isinstance(err, CheckpointSaveError):
        line = str(err)
    elif isinstance(err, OSError) and err.errno not in _NOT_THE_DISK:
        line = os_error_line(err)
    else:
        return None
    where = "" if _refused_by_next_run(run_dir) else newest_checkpoint(run_dir, resume)
    ended = RunEndedError(f"{line}; {where}" if where else line)
    ended.every_rank = getattr(err, "every_rank", False)
    return ended


def _refused_by_next_run(run_dir: str | os.PathLike) -> bool:
    """Whether the next run refuses `run_dir` before it starts, for what stands where a run
    writes (`run_dir_links.check_run_dir_entries`: a FIFO or directory at metrics.jsonl put
    there during the run). The failure's own line names it; "run the same command again"
    would fail the same way, so no resume advice is added."""
    from trainer.run_dir_links import check_run_dir_entries
    from trainer.run_files import RunDirEntryError

    try:
        check_run_dir_entries(run_dir)
    except RunDirEntryError:
        return True
    return False
