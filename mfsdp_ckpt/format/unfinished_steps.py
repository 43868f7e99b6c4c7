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
from mfsdp_ckpt.format.dir_entries import children
from mfsdp_ckpt.format.layout import (
    CheckpointPathError,
    DamagedRunDirError,
    IncompleteCheckpointError,
)
from mfsdp_ckpt.format.path_refusals import missing_dcp
from mfsdp_ckpt.format.run_steps import (
    EMPTY,
    NOT_A_STEP,
    UNFINISHED,
    marked_unfinished,
    natural_order,
    newest_of,
    step_dirs,
    step_states,
    unfinished_save,
)
from mfsdp_ckpt.storage.byte_store import CheckpointFileError


def step_unfinished_said(step: Path, err: MfsdpError) -> str | None:
    """What `err`, met reading the step dir `step`, says of a save that did not finish,
    where `step` is one: the layout's own line ("RUN/iter_0000200: empty, no .metadata:
    ..."), or for a step no layout claims (verl's empty `global_step_N/`, one holding an
    empty `actor/`) the same words of the step, where "not a checkpoint" (exit 2) sent
    users to fix their command, not the run. None for any other refusal (another format,
    a role to pick), which stays as it is."""
    if isinstance(err, IncompleteCheckpointError):
        return str(err)
    if type(err) is not CheckpointPathError:  # a format or a route of its own
        return None
    state = step_states(step.parent, [step.name])[step.name]
    if state == EMPTY:
        return str(missing_dcp(step))
    lacks = unfinished_save(step) if state == UNFINISHED else None
    return None if lacks is None else f"{step}: holds no {lacks}: this save did not finish"


def other_steps_said(run: Path, step: Path) -> str:
    """` (other step dirs here: iter_0000010, iter_0000030 (a save that did not finish))`:
    the step dirs of `run` beside `step`, newest last, or "" where there are none (or the
    run dir cannot be listed)."""
    try:
        steps = step_dirs(run, children(run))
    except (CheckpointPathError, CheckpointFileError):
        return ""
    others = sorted((name for name, path in steps.items() if path != step), key=natural_order)
    return f" (other step dirs here: {newest_of(marked_unfinished(run, others))})" if others else ""


def refuse_unfinished_step(given: Path, err: MfsdpError) -> None:
    """IncompleteCheckpointError (exit 1) where `given`, a step dir given directly, is a
    save that did not finish and reading it failed with `err`: what it lacks and the step
    dirs beside it, as a tracker naming it is told. Returns for any other path or error."""
    if isinstance(err, DamagedRunDirError):  # a tracker's own line
        return
    if step_states(given.parent, [given.name])[given.name] == NOT_A_STEP:
        return
    said = step_unfinished_said(given, err)
    if said is not None:
        raise IncompleteCheckpointError(said + other_steps_said(given.parent, given)) from None
