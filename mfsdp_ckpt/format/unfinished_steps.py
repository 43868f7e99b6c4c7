"""A step dir whose save did not finish, in one line for every route that meets it.

A tracker naming such a step (`UnfinishedTrackedStepError`) and the step given directly
(verl's empty `global_step_N/`, Megatron-LM's empty `iter_NNNNNNN/`) are the same damage:
both say what the step lacks, in the layout's own words, and the other step dirs beside
it, the unfinished ones marked, so the user sees the complete one to give. Given
directly, verl's empty step was "not a checkpoint" (exit 2) while Megatron's was exit 1
with no step offered.
"""

from __future__ import annotations

from pathlib import Path

from mfsdp_ckpt.errors import MfsdpError
from mfsdp_ckpt.format.dir_entries import children, is_dir
from mfsdp_ckpt.format.layout import (
    MAX_RUNS_LISTED,
    CheckpointPathError,
    DamagedRunDirError,
    IncompleteCheckpointError,
)
from mfsdp_ckpt.format.path_refusals import missing_dcp
from mfsdp_ckpt.format.run_steps import (
    EMPTY,
    UNFINISHED,
    holds_complete_step,
    is_step_name,
    marked_unfinished,
    natural_order,
    newest_of,
    step_states,
    unfinished_save,
)
from mfsdp_ckpt.format.save_pieces import holds_save_pieces
from mfsdp_ckpt.storage.byte_store import CheckpointFileError


def step_unfinished_said(step: Path, err: MfsdpError) -> str | None:
    """What `err`, met reading the step dir `step`, says of a save that did not finish,
    where `step` is one: the layout's own line ("RUN/iter_0000200: empty, no .metadata:
    ..."), or for a step no layout claims (verl's empty `global_step_N/`, one holding an
    empty `actor/`) the same words of the step, where "not a checkpoint" (exit 2) sent
    users to fix their command, not the run. None for any other refusal (another format,
    a role to pick), and for a step-named dir holding no save (`holds_save_pieces`: a
    Hugging Face model, an adapter), whose own line stands, given directly or through a
    tracker naming it."""
    if isinstance(err, IncompleteCheckpointError):
        return str(err)
    if type(err) is not CheckpointPathError:  # a format or a route of its own
        return None
    if not holds_save_pieces(step):
        return None
    # mfsdp's run or not (`ours`) changes no answer here: a step it marks lacks what
    # `unfinished_save` says, or nothing; so the run's other steps are not looked at
    state = step_states(step.parent, [step.name], ours=False)[step.name]
    if state == EMPTY:
        return str(missing_dcp(step))
    lacks = unfinished_save(step) if state == UNFINISHED else None
    return None if lacks is None else f"{step}: holds no {lacks}: this save did not finish"


def other_steps_said(run: Path, step: Path) -> str:
    """` (other step dirs here: iter_0000010, iter_0000030 (a save that did not finish))`:
    the newest step dirs of `run` beside `step`, newest last, or "" where there are none (or
    the run dir cannot be listed). The run is listed once and its step names sorted by
    number; only the MAX_RUNS_LISTED newest are looked at on disk (a dir, and what
    `step_states` marks), the older ones counted by their names: verl keeps every step,
    and judging each of 20,000 steps to show 8 took minutes."""
    try:
        names = children(run)
    except (CheckpointPathError, CheckpointFileError):
        return ""
    named = sorted((n for n in names if is_step_name(n) and n != step.name), key=natural_order)
    shown: list[str] = []
    older = len(named)
    while older and len(shown) < MAX_RUNS_LISTED:
        older -= 1
        if is_dir(run / named[older]):
            shown.insert(0, named[older])
    if not shown:
        return ""
    marked = marked_unfinished(run, shown, ours=holds_complete_step(run, shown))
    return f" (other step dirs here: {newest_of(marked, older)})"


def refuse_unfinished_step(given: Path, err: MfsdpError) -> None:
    """IncompleteCheckpointError (exit 1) where `given`, a step dir given directly, is a
    save that did not finish and reading it failed with `err`: what it lacks and the step
    dirs beside it, as a tracker naming it is told. Returns for any other path or error: a
    dir not named as a step (its run is not listed) and a step-named dir holding no save
    (`holds_save_pieces`), whose own line stands."""
    if isinstance(err, DamagedRunDirError) or not is_step_name(given.name):
        return
    said = step_unfinished_said(given, err)
    if said is not None:
        raise IncompleteCheckpointError(said + other_steps_said(given.parent, given)) from None
