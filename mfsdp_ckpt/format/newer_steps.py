"""What a run dir holds past the step its tracker names, said beside the step read.

verl, Megatron-LM and Megatron-Bridge resume from the step their tracker names, and so do
the commands here; step dirs newer than it are not read, but a user who wants the newest
weights should hear of them. Every newer step dir is named (the newest few when there are
many), each save that did not finish as such, with why a complete one can lie past the
tracker as its writer saves: older verl's async save never updated the tracker (verl now
writes it once a save is done), and Megatron-LM and Megatron-Bridge write theirs only when
a save is finalized, so a run stopped between the two (or a tracker set back) leaves one.
A `release` tracker names Megatron's release/ dir, past which every `iter_N/` is noted.
A newer step a part of which links out of it (`linked_out_part`) is named as such, never
offered: reading it is refused ("resolves outside").

`checkpoint.resume=auto` on mfsdp's own run dir says the same of the steps it trains over
(`resumed=True`): mfsdp points the tracker at a step once it is in place, so a step dir past
it is a save stopped before that (one per run stopped so) or a tracker set back, and the run
replaced it, or left it beside its own steps, without a line.
"""

from __future__ import annotations

from pathlib import Path

from mfsdp_ckpt.format.layout import (
    BRIDGE_TRACKER_FILE,
    MEGATRON_RELEASE_DIR,
    TRACKER_FILE,
    is_megatron_step_name,
    iter_step,
    parse_step_dir_name,
)
from mfsdp_ckpt.format.run_steps import (
    linked_out_part,
    linked_out_said,
    newest_of,
    unfinished_save,
)

_OWN_WHY = (
    "mfsdp points the tracker at a step once it is in place: a run stopped between the two,"
    " or a tracker set back, leaves a newer step behind"
)


def _why_past_tracker(name: str, tracker: str, resumed: bool = False) -> str:
    """Why a complete step dir `name` can lie past the tracker, as its writer saves
    (`resumed`: mfsdp's own run dir, which a resume reads)."""
    if resumed:
        return _OWN_WHY
    if not is_megatron_step_name(name):
        return (
            "older verl's async save never updated the tracker; verl now writes it once a"
            " save is done"
        )
    tool = "Megatron-Bridge" if tracker == BRIDGE_TRACKER_FILE else "Megatron-LM"
    return (
        f"{tool} writes the tracker once a save is finalized: a run stopped before that, or a"
        " tracker set back, leaves a newer step behind"
    )


def newer_than_tracked(
    run: Path,
    tracked: str,
    steps: dict[str, Path],
    tracker: str = TRACKER_FILE,
    *,
    resumed: bool = False,
) -> str | None:
    """The note naming the step dirs of `run` (`steps`: name -> dir) past the `tracked`
    step (a number, or `release`), or None when there are none. `resumed`: said by a run
    that resumes the tracked step of its own run dir and trains over them, naming the
    `checkpoint.resume` that resumes the newer one instead."""
    release = tracked == MEGATRON_RELEASE_DIR
    after = -1 if release else int(tracked)
    numbered = {name: parse_step_dir_name(name) or iter_step(name) for name in steps}
    newer = sorted((step, name) for name, step in numbered.items() if step is not None)
    newer = [(step, name) for step, name in newer if step > after]
    if not newer:
        return None
    refused = {name: _not_given(steps[name]) for _step, name in newer}
    complete = [name for _step, name in newer if refused[name] is None]
    named = f"{run / tracker} names " + ("'release'" if release else f"step {after}")
    reading = f"reading {MEGATRON_RELEASE_DIR}/" if release else f"reading step {after}"
    given = f"{run / complete[-1]}" if complete else ""
    if resumed:
        reading = f"resuming step {after} and training over " + (
            f"it (left beside this run's steps until a save of step {newer[0][0]} replaces it)"
            if len(newer) == 1
            else "them (each left beside this run's steps until a save of its step replaces it)"
        )
        given = f"checkpoint.resume={given}"
    why = f" ({_why_past_tracker(complete[-1], tracker, resumed)})" if complete else ""
    read = "resume" if resumed else "read"
    give = f": give {given} to {read} the newer one" if complete else ""
    if len(newer) == 1:
        step, name = newer[0]
        not_given = refused[name]
        if not_given is not None:
            clause, _mark = not_given
            return f"{named}, but {name}/ (step {step}) is newer and {clause}; {reading}"
        return f"{named}, but {name}/ (step {step}) is newer{why}; {reading}{give}"
    listed = [f"{name}/ (step {step}{(refused[name] or ('', ''))[1]})" for step, name in newer]
    if complete:
        give = f": give {given} to {read} the newest complete one"
    return (
        f"{named}, but {len(newer)} newer step dirs are here: {newest_of(listed)}{why};"
        f" {reading}{give}"
    )


def _not_given(step: Path) -> tuple[str, str] | None:
    """Why the newer step dir `step` is no step to give (a part linking out of it, or a
    save that did not finish and what it lacks), as a clause after "is newer and" and as
    a mark after it in a list of several; None for a complete one."""
    linked = linked_out_part(step)
    if linked is not None:
        said = linked_out_said(step, linked)
        return said, f", {said}"
    lacks = unfinished_save(step)
    if lacks is None:
        return None
    return (
        f"holds no {lacks}: a save that did not finish",
        f", a save that did not finish: no {lacks}",
    )


__all__ = ["newer_than_tracked"]
