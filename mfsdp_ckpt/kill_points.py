"""Where crash-safety tests kill a rank in the middle of a save.

`MFSDP_CKPT_KILL_AT=<phase>[:<rank>][@<step>]` makes the named rank (every rank without
one) SIGKILL itself at that phase of the save of that step (every save without one). The
reliability tests (tests/reliability/) set it to show that a crash at each phase leaves the
previous step and the tracker valid; the checkpointer calls `maybe_die` at each phase.
Nothing happens while it is unset.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

from mfsdp_ckpt.errors import MfsdpUsageError

KILL_AT_ENV = (
    "MFSDP_CKPT_KILL_AT"  # <phase>[:<rank>][@<step>]: crash-safety tests SIGKILL a rank there
)

SAVE_PHASES = (
    "before_files",  # temp dir exists, nothing written
    "mid_file",  # a DCP data file being written holds its first bytes only
    "after_files",  # DCP files written, not yet hashed
    "before_manifest",  # files hashed and gathered, huggingface/ written
    "after_manifest",  # manifest written, temp dir not yet renamed
    "after_rename",  # step dir final, tracker not yet replaced
)
# After the save's commit, while `checkpoint.keep_last` removes an old step (retention.py):
# the step renamed out of the step names, not yet deleted.
PRUNE_PHASES = ("mid_prune",)
KILL_PHASES = SAVE_PHASES + PRUNE_PHASES


@dataclass(frozen=True)
class KillPoint:
    phase: str
    rank: int | None  # None: every rank
    step: int | None  # None: every save


def kill_point() -> KillPoint | None:
    """MFSDP_CKPT_KILL_AT=<phase>[:<rank>][@<step>] read, None when unset. A phase not in
    KILL_PHASES is refused, not ignored: the crash test that set it would pass without its
    kill ever happening; so is a rank or step that is not a number. A phase of
    PRUNE_PHASES kills the rank that prunes after the save of that step."""
    given = os.environ.get(KILL_AT_ENV)
    if not given:
        return None
    target, has_step, step = given.partition("@")
    phase, has_rank, rank = target.partition(":")
    numbers = [n for n, named in ((rank, has_rank), (step, has_step)) if named]
    if phase not in KILL_PHASES or not all(n.isascii() and n.isdigit() for n in numbers):
        raise MfsdpUsageError(
            f"{KILL_AT_ENV}={given!r}: not <phase>[:<rank>][@<step>] with a phase of "
            f"{', '.join(KILL_PHASES)}"
        )
    return KillPoint(phase, int(rank) if has_rank else None, int(step) if has_step else None)


def kill_targets(phase: str, step: int, rank: int) -> bool:
    """Whether MFSDP_CKPT_KILL_AT (`kill_point`) names this phase, rank and step."""
    point = kill_point()
    return (
        point is not None
        and point.phase == phase
        and point.rank in (None, rank)
        and point.step in (None, step)
    )


def maybe_die(phase: str, step: int, rank: int) -> None:
    """Crash-safety tests SIGKILL a rank here (no cleanup, no flush: as a node failure would)."""
    if kill_targets(phase, step, rank):
        os.kill(os.getpid(), signal.SIGKILL)
