"""Our run dir's step dirs and trackers: which steps are complete, which one a run
resumes, and which entries a run would save over.

The trainer, retention, validate and the CLI's run report all ask here, so the step a
run resumes, the step a check names and the step a Ctrl-C'd run reports are the same.
Trackers (ours, verl's and Megatron-Bridge's) are read bounded through `safe_files`: a
FIFO, a huge file or a symlink out of the run is one line, never a hang. Every list of a
run's step dirs (any layout's) marks a save that did not finish and a step whose parts link
out of it, so that no line offers one as a step to give, and no resume picks one.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.format import hf_trainer
from mfsdp_ckpt.format.dcp_metadata import load_metadata
from mfsdp_ckpt.format.dir_entries import children, is_dir, leads_out
from mfsdp_ckpt.format.foreign_formats import refuse_foreign_format
from mfsdp_ckpt.format.layout import (
    BRIDGE_TRACKER_FILE,
    BRIDGE_TRACKER_MAX_BYTES,
    DCP_METADATA_FILE,
    DIST_CKPT_DIR,
    MANIFEST_FILE,
    MAX_RUNS_LISTED,
    MEGATRON_RELEASE_DIR,
    ROLES,
    TRACKER_FILE,
    TRACKER_MAX_BYTES,
    VERL_CONTENTS_FILE,
    VERL_MODEL_DIR,
    CheckpointPathError,
    DamagedRunDirError,
    DamagedTrackerError,
    ForeignFormatError,
    is_megatron_step_name,
    parse_step_dir_name,
    step_dir,
)
from mfsdp_ckpt.format.save_pieces import holds_save_pieces
from mfsdp_ckpt.format.unfinished_torch_dist import (
    LEGACY_COMMON_FILE,
    TORCH_DIST_MARKER,
    UNFINISHED_TORCH_DIST_LACKS,
    is_unfinished_torch_dist,
)
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.confined_stat import LeadsOutError, confined_stat

_STEP_TEXT_RE = re.compile(r"[0-9]{1,18}")  # ASCII only: "²".isdigit() is True


def holds_complete_step(run: Path, names: list[str]) -> bool:
    """Whether one of `names` (entries of `run`) is a `global_step_N` holding its manifest,
    which makes `run` mfsdp's (whether that step's parts stay in it or not): `step_states`'
    `ours`, asked of those names alone."""
    return any(
        parse_step_dir_name(name) is not None and _is_file_followed(run / name / MANIFEST_FILE)
        for name in names
    )


def list_complete_steps(run_dir: str | os.PathLike) -> list[int]:
    """Steps whose directory holds a manifest and no part linking out of it
    (`linked_out_part`: reading such a step is refused, "resolves outside"), ascending.
    Temporary dirs never count."""
    run = Path(run_dir)
    if not run.is_dir():
        return []
    steps = []
    for child in run.iterdir():
        step = parse_step_dir_name(child.name)
        if step is not None and _is_complete(child):
            steps.append(step)
    return sorted(steps)


def _is_complete(step: Path) -> bool:
    """A step of ours to give: its manifest is there, and no part of it links out."""
    return _is_file_followed(step / MANIFEST_FILE) and _our_linked_out_part(step) is None


def confining_dir(given: Path, root: Path) -> Path:
    """The directory every read of the checkpoint at `root` stays in, where the user named
    `given`: a step dir (`global_step_N`, Megatron's `iter_N` and `release`) of a run dir
    `given` (or of a run below it) is its own, read where its link leads, as the trainer
    resumes it and as naming the step dir reads it: a step moved to another disk and linked
    back is the user's (`checkpoint.keep_last` never removes the link), and `validate RUN`
    refused it as "resolves outside" while `train` resumed it. The run dir between `given`
    and the step must not lead out of `given` (CheckpointFileError). Any other `root`
    stays in `given`."""
    inside = root != given and root.parent.is_relative_to(given)
    if not inside or not is_step_name(root.name):
        return given
    if root.parent != given:
        safe_files.resolve_inside(root.parent, given, within=str(given))
    return root


def resume_step(run_dir: str | os.PathLike) -> int | None:
    """The step `checkpoint.resume=auto` resumes in `run_dir`: the tracker's when it names
    a complete step, else the newest complete one (the tracked step was removed, or no
    tracker was written). None only when there is nothing to resume: no tracker and no step
    dir of any layout (an unfinished save's `global_step_N.tmp/` does not count: the next
    save of that step replaces it).

    Refused (DamagedRunDirError, exit 1) where resuming would take the run dir for one with
    less in it than it holds: a tracked step that is there but incomplete (the tracker is
    written only once its step is complete, so it was damaged since) or a file; a tracker
    whose step is gone with no complete step left; and whatever this run's saves would
    replace that is no complete step (`refuse_replacing_steps`). Taken for "nothing to
    resume", a damaged only step was trained over from step 0 and overwritten. Resuming, the
    check before a run starts and the line a Ctrl-C'd run ends with all ask here, so the
    step named is the step resumed.

    Another trainer's run dir (verl's, Megatron-LM's) is refused first, as what it is
    (`refuse_foreign_run_dir`), never as a damaged run of ours."""
    run = Path(run_dir)
    _refuse_another_trainers_run(run)
    steps = list_complete_steps(run)
    resumed = _tracked_or_newest(run, read_tracker(run), steps)
    _refuse_replacing(run, resumed)
    return resumed


def _refuse_another_trainers_run(run: Path) -> None:
    """`foreign_run_dirs.refuse_foreign_run_dir`, imported here: it names the layout as
    resolution does, and resolution reads run dirs through this module. A run holding a
    step with its manifest is mfsdp's, whether that step's parts stay in it or not: asked
    of such a run, the refusal resolved it, which asked here again."""
    if _holds_our_step(run):
        return
    from mfsdp_ckpt.format.foreign_run_dirs import refuse_foreign_run_dir

    refuse_foreign_run_dir(run)


def _tracked_or_newest(run: Path, tracked: int | None, steps: list[int]) -> int | None:
    """The tracker's step when complete, else the newest complete one, or a refusal when the
    tracked step is there but no complete step, or gone with nothing complete left."""
    if tracked is None:
        return steps[-1] if steps else None
    if tracked in steps:
        return tracked
    target = step_dir(run, tracked)
    if _is_complete(target):  # saved since the steps were listed
        return tracked
    if os.path.lexists(target):
        refuse_tracked_step_holding_no_save(run, tracked)
        instead = (
            f"move it away to resume from step {steps[-1]}"
            if steps
            else "move it and the tracker away to start afresh"
        )
        raise DamagedRunDirError(
            f"{run / TRACKER_FILE}: names step {tracked}, but {target}"
            f" {incomplete_step(target)}; {instead}, or give checkpoint.resume=PATH"
        )
    if steps:  # removed on purpose: the newest left is resumed
        return steps[-1]
    instead = (
        "move the tracker away to start afresh, or give checkpoint.resume=PATH"
        if not any(is_megatron_step_name(name) for name in children(run))
        else "it is Megatron-LM's tracker, which mfsdp does not resume: give another"
        " trainer.run_dir"
    )
    raise DamagedRunDirError(
        f"{run / TRACKER_FILE}: names step {tracked}, but {target} is missing"
        f"{steps_here(run)} and no step is complete; {instead}"
    )


def refuse_tracked_step_holding_no_save(run: Path, tracked: int) -> None:
    """CheckpointPathError (exit 2) where the step dir the tracker of mfsdp's run dir `run`
    names (`tracked`) holds no piece of a save (`holds_save_pieces`: a Hugging Face model,
    an adapter, a config.json alone) and reading it gives its own line of what it is: that
    line, under the tracker, as another trainer's run dir gives it. Called "a save that
    did not finish", the user looked for a save never made. A step a part of which links
    out of it (`linked_out_part`, left out of `list_complete_steps`) is refused as reading
    it is, CheckpointFileError naming the link: validate, inspect, export-hf and a resume
    of the run say the same line of the step its tracker names. Returns for any other step
    dir (a save that did not finish keeps its line, exit 1) and for any other refusal."""
    # imported here: resolution reads run dirs through this module
    from mfsdp_ckpt.format.checkpoint_resolution import resolve_checkpoint

    target = step_dir(run, tracked)
    linked = linked_out_part(target) if is_dir(target) else None
    if linked is not None:
        raise CheckpointFileError(f"{linked}: resolves outside the checkpoint")
    if not is_dir(target) or os.path.lexists(target / MANIFEST_FILE):
        return  # a manifest there, damaged: `manifest_damage` names it
    if holds_save_pieces(target):
        return
    try:
        resolve_checkpoint(target, _depth=1)
    except CheckpointPathError as err:
        if type(err) is CheckpointPathError:  # what it is; a subclass is a route of its own
            raise CheckpointPathError(
                f"{run / TRACKER_FILE}: names step {tracked}, but {err}"
            ) from None


def refuse_replacing_steps(run_dir: str | os.PathLike, resumed: int | None) -> None:
    """DamagedRunDirError naming the first entry of `run_dir` that a run resuming step
    `resumed` (None: one starting afresh) would save over or leave behind, unless it is a
    complete step: a `global_step_N` past `resumed` that is a file or an incomplete step
    dir (its save of step N replaces whatever is there, whole), and for a run starting
    afresh any step dir at all (Megatron-LM's `iter_N/` too: its tracker would be
    replaced by this run's). Older steps stay as they are, never saved over, and so do
    links past `resumed` (a save replaces the link, not what it leads to). Another
    trainer's run dir is refused as what it is (`refuse_foreign_run_dir`): by a run
    starting afresh, and wherever one of its step dirs would be named to move away."""
    run = Path(run_dir)
    if resumed is None:
        _refuse_another_trainers_run(run)
    _refuse_replacing(run, resumed)


def _refuse_replacing(run: Path, resumed: int | None) -> None:
    """`refuse_replacing_steps`' look at each entry; before a step dir is named to move
    away, the run dir is asked whether it is another trainer's (then named as that)."""
    if not os.path.isdir(run):
        return
    for name in sorted(children(run), key=natural_order):
        path = run / name
        step = parse_step_dir_name(name)
        if step is not None:
            if resumed is not None and (step <= resumed or os.path.islink(path)):
                continue
            if _is_complete(path):
                continue
            saving = (
                "a run starting afresh here saves over it"
                if resumed is None
                else f"resuming step {resumed}, a save of step {step} replaces it"
            )
            _refuse_another_trainers_run(run)
            raise DamagedRunDirError(f"{path} {incomplete_step(path)}, and {saving}: move it away")
        elif resumed is None and is_megatron_step_name(name) and is_dir(path):
            raise DamagedRunDirError(
                f"{path} is a Megatron-LM checkpoint, and no mfsdp step is here to resume: a"
                " run starting afresh here writes its steps and tracker beside it; give"
                " another trainer.run_dir"
            )


def incomplete_step(path: Path) -> str:
    """What is at a step dir's name that makes it no complete step, in words. A dir
    without its manifest is named as `step_states` marks it in the lists beside the line
    (`unfinished_saves`): an empty one, or one of mfsdp's run, as a save that did not
    finish; the line called it "damaged after it was saved, or another trainer's" while
    its own list marked it "(a save that did not finish)". A step whose part links out of
    it is named by that part (`linked_out_said`), as reading it names the link."""
    if is_dir(path):
        linked = linked_out_part(path)
        if linked is not None:
            return linked_out_said(path, linked)
        damage = manifest_damage(path)
        if damage is not None:
            return f"holds a {MANIFEST_FILE} that is {damage}"
        if unfinished_saves(path.parent, [path.name]):
            return f"holds no {MANIFEST_FILE}, which mfsdp writes last{UNFINISHED_MARK}"
        return (
            f"holds no {MANIFEST_FILE}, which mfsdp writes last (damaged after it was saved,"
            " or another trainer's)"
        )
    return "is a file, not a step dir" if _is_file_followed(path) else "is not a directory"


def manifest_damage(step: Path) -> str | None:
    """What the `manifest.json` in `step` is when one is there but it is no regular file to
    read ("a FIFO, not a regular file"; a link leading nowhere is "unreadable (...)"), in
    the words reading the step itself uses; None when there is none (a save stopped before
    writing it, which `incomplete_step` says) or it is a regular file. Such a step is not
    complete, as before: this only names what is there, where "holds no manifest.json" or
    "missing or incomplete" sent the user looking for a file that is there."""
    manifest = step / MANIFEST_FILE
    if not os.path.lexists(manifest):
        return None
    try:
        mode = os.stat(manifest).st_mode
    except OSError as err:
        return f"unreadable ({err.strerror or err})"
    return None if stat.S_ISREG(mode) else f"{safe_files.kind_name(mode)}, not a regular file"


def is_step_name(name: str) -> bool:
    """`name` is a step dir's of any layout (`global_step_N`, Megatron's `iter_N` and
    `release`), told by the name alone: nothing is looked at on disk."""
    return parse_step_dir_name(name) is not None or is_megatron_step_name(name)


def refuse_manifest_leading_out(step: Path) -> None:
    """CheckpointFileError when the `manifest.json` of `step` is a link leading out of it,
    in the line reading the step itself gives (validate, a resume): a run's readers took
    it for no manifest, and `inspect RUN` called the step "missing or incomplete"."""
    manifest = step / MANIFEST_FILE
    if not os.path.islink(manifest):
        return
    try:
        confined_stat(manifest, step)
    except LeadsOutError:
        raise CheckpointFileError(f"{manifest}: resolves outside the checkpoint") from None
    except PermissionError:  # a step dir not to be searched: named where it is read
        return


def _is_file_followed(path: Path) -> bool:
    """`Path.is_file`, except that a step dir this user cannot read counts as incomplete
    instead of raising: an old step left by another user must not stop a resume, and
    reading the one step asked for names it (`is_dcp`)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def read_tracker(run_dir: str | os.PathLike) -> int | None:
    """The step named by mfsdp's (or verl's) tracker, or None when there is no tracker yet."""
    text = read_tracker_text(run_dir)
    if text is None:
        return None
    if not _STEP_TEXT_RE.fullmatch(text):
        tracker = Path(run_dir) / TRACKER_FILE
        raise DamagedTrackerError(
            f"{tracker}: expected a step number, found {cut_to(repr(text), 40)}"
            f"{steps_here(run_dir)}",
            tracker,
        )
    return int(text)


def read_tracker_text(run_dir: str | os.PathLike) -> str | None:
    """The tracker's stripped text (a step, or Megatron-LM's `release`); None when absent.

    Read through `safe_files`: a FIFO, a directory, 5,000 digits or non-UTF-8 bytes are
    one line naming the file, not a hang or a traceback. Any of them, an empty tracker or
    one that holds no step number is a damaged tracker (DamagedTrackerError)."""
    tracker = Path(run_dir) / TRACKER_FILE
    if not os.path.lexists(tracker):
        return None
    try:
        text = safe_files.read_text(tracker, TRACKER_MAX_BYTES, root=run_dir).strip()
    except CheckpointFileError as err:
        raise DamagedTrackerError(f"{err}{steps_here(run_dir)}", tracker) from None
    if not (_STEP_TEXT_RE.fullmatch(text) or text == MEGATRON_RELEASE_DIR):
        raise DamagedTrackerError(
            f"{tracker}: expected a step number, found"
            f" {cut_to(repr(text), 40)}{steps_here(run_dir)}",
            tracker,
        )
    return text


def read_bridge_tracker(run_dir: str | os.PathLike) -> str | None:
    """The step Megatron-Bridge's `latest_train_state.pt` names, as tracker text; None when
    absent. Read bounded through `safe_files` and `saved_objects.load_scalars` (the
    restricted unpickler: no torch.load); anything but a train state with an integer
    `step` of at least 0 is a damaged tracker (DamagedTrackerError)."""
    from mfsdp_ckpt.errors import CheckpointFormatError
    from mfsdp_ckpt.format.saved_objects import load_scalars

    tracker = Path(run_dir) / BRIDGE_TRACKER_FILE
    if not os.path.lexists(tracker):
        return None
    try:
        raw = safe_files.read_bytes(tracker, BRIDGE_TRACKER_MAX_BYTES, root=run_dir)
        scalars = load_scalars(raw, str(tracker))
    except (CheckpointFileError, CheckpointFormatError) as err:
        raise DamagedTrackerError(f"{err}{steps_here(run_dir)}", tracker) from None
    problem = _bridge_step_problem(scalars)
    if problem is not None:
        raise DamagedTrackerError(f"{tracker}: {problem}{steps_here(run_dir)}", tracker)
    return str(scalars["step"])


_BRIDGE_STEP_LIMIT = 10**18  # far past any run's step count, and an iter dir name's digits


def _bridge_step_problem(scalars: dict[str, int | float | bool]) -> str | None:
    """What is wrong with a Bridge train state's `step`, in words saying what it is (no
    entry, an integer out of range, no integer); None for a step to read."""
    if "step" not in scalars:
        return "holds no 'step' entry"
    step = scalars["step"]
    if isinstance(step, bool) or not isinstance(step, int):
        return f"expected an integer step, found {cut_to(repr(step), 40)}"
    if not 0 <= step < _BRIDGE_STEP_LIMIT:
        shown = str(step) if step.bit_length() <= 64 else f"an integer of {step.bit_length()} bits"
        return f"step {shown} is out of range (0 to {_BRIDGE_STEP_LIMIT - 1})"
    return None


def untracked_step_note(run_dir: str | os.PathLike, name: str) -> str | None:
    """What reading mfsdp's run dir without its tracker says: the run dir, that it has no
    tracker, that `name` (the newest complete step) is read, the other step dirs (marked
    by `step_states`) and what `checkpoint.resume=auto` does with the run, asked of
    `resume_step` itself, so that the note and a resume never disagree (a save past `name`
    that did not finish makes resume refuse until it is moved away). The trainer writes the
    tracker after every save, so a run without one was copied or edited: which of its steps
    stands for it is said, not taken silently. None when `name` is its only step dir and
    resume takes it: there was nothing to choose."""
    run = Path(run_dir)
    others = sorted((n for n in step_dirs(run, children(run)) if n != name), key=natural_order)
    refusal = resume_refusal(run)
    if not others and refusal is None:
        return None
    shown = newest_of(marked_unfinished(run, others))
    head = f"{run} has no {TRACKER_FILE}: reading {name}, the newest complete step"
    if refusal is None:
        return (
            f"{head}, the one checkpoint.resume=auto resumes without it;"
            f" other step dirs here: {shown}"
        )
    listed = f" (other step dirs here: {shown})" if others else ""
    return f"{head}{listed}; {refusal}"


def resume_refusal(run_dir: str | os.PathLike) -> str | None:
    """What a note on reading mfsdp's run dir says of `checkpoint.resume=auto` when
    `resume_step` refuses `run_dir` ("checkpoint.resume=auto refuses this run dir: " and
    its own line), else None: what the tools say of a resume is what a resume does."""
    from mfsdp_ckpt.errors import MfsdpError

    try:
        resume_step(run_dir)
    except MfsdpError as err:
        return f"checkpoint.resume=auto refuses this run dir: {err}"
    return None


def steps_here(run_dir: str | os.PathLike) -> str:
    """` (step dirs here: global_step_10, global_step_20)` or ` (no step dirs here)`: what a
    message about a broken tracker adds, so the user sees what could be read instead."""
    run = Path(run_dir)
    try:
        names = sorted(step_dirs(run, children(run)), key=natural_order)
    except CheckpointPathError:
        return ""
    if not names:
        return " (no step dirs here)"
    return f" (step dirs here: {newest_of(marked_unfinished(run, names))})"


def complete_step_dirs(run_dir: str | os.PathLike) -> list[Path]:
    """The step dirs of `run_dir` that `step_states` finds complete, oldest first (in the
    Hugging Face Trainer's output dir, its checkpoints that resume: `resumable_checkpoints`):
    those a user may give in place of a run dir whose tracker failed, each read alone."""
    run = Path(run_dir)
    try:
        entries = children(run)
    except (CheckpointPathError, CheckpointFileError):
        return []
    names = sorted(step_dirs(run, entries), key=natural_order)
    if not names:
        return hf_trainer.resumable_checkpoints(run, entries)
    states = step_states(run, names)
    return [run / name for name in names if states[name] == COMPLETE]


def marked_unfinished(run: Path, names: list[str], ours: bool | None = None) -> list[str]:
    """`names` (step dirs of `run`) with `UNFINISHED_MARK` after each whose save did not
    finish (`unfinished_saves`) and `LINKED_OUT_MARK` after each whose part links out of
    it: a list of step dirs is read as the steps one may give, and either given is
    refused. `ours` as `step_states` takes it."""
    states = step_states(run, names, ours)
    marks = {UNFINISHED: UNFINISHED_MARK, EMPTY: UNFINISHED_MARK, LINKED_OUT: LINKED_OUT_MARK}
    return [f"{name}{marks.get(states[name], '')}" for name in names]


UNFINISHED_MARK = " (a save that did not finish)"
LINKED_OUT_MARK = " (a part of it links out of the step)"


def unfinished_saves(run: Path, names: list[str], ours: bool | None = None) -> set[str]:
    """Those of `names` (step dirs of `run`) that `step_states` finds unfinished or empty:
    neither is a step to give. `ours` as `step_states` takes it."""
    states = step_states(run, names, ours)
    return {name for name, state in states.items() if state in (UNFINISHED, EMPTY)}


COMPLETE = "complete"
UNFINISHED = "unfinished"
EMPTY = "empty"
LINKED_OUT = "linked out"
NOT_A_STEP = "not a step"


def step_states(run: Path, names: list[str], ours: bool | None = None) -> dict[str, str]:
    """{name: what it is} for `names` (entries of `run`): the one place that decides which
    step dirs are steps to give, so every line listing them (a refusal to choose, a note,
    `steps_here`) marks the same ones. NOT_A_STEP: no step dir's name, not a directory,
    or a dir lacking what its save writes last that holds no piece of a save either
    (`holds_save_pieces`: a Hugging Face model, an adapter), which no list marks as a
    save that did not finish.
    EMPTY: a dir holding nothing, a save that wrote nothing (given, it is refused as one
    that did not finish). LINKED_OUT: a step a part of which links out of it
    (`linked_out_part`), whatever lies at the link's target: reading it is refused
    ("resolves outside"). UNFINISHED: a save begun and not finished (`unfinished_save`),
    and in mfsdp's run (a step of it holds a manifest) any step dir without its manifest,
    which mfsdp writes last. COMPLETE: the rest; a dir that cannot be listed is left for
    reading it to name. `ours` (mfsdp's run) is asked of every step of `run` unless given:
    a caller judging a few names of a run of thousands of steps tells it from those
    (`holds_complete_step`), so the work does not grow with the run."""
    if ours is None:
        ours = _holds_our_step(run)
    return {name: _step_state(run / name, ours) for name in names}


def _holds_our_step(run: Path) -> bool:
    """Whether `run` holds a `global_step_N` with its manifest, whether its parts stay in it
    or not (`list_complete_steps` leaves those out): a run whose steps link out is still
    mfsdp's."""
    try:
        return holds_complete_step(run, children(run))
    except (CheckpointPathError, CheckpointFileError):
        return False


def _step_state(step: Path, ours: bool) -> str:
    if not is_step_name(step.name) or not is_dir(step):
        return NOT_A_STEP
    try:
        if not children(step):
            return EMPTY
        if linked_out_part(step) is not None:
            return LINKED_OUT
        unfinished = unfinished_save(step) is not None
    except (CheckpointPathError, CheckpointFileError):
        return COMPLETE
    if unfinished or (ours and not _is_file_followed(step / MANIFEST_FILE)):
        return UNFINISHED if holds_save_pieces(step) else NOT_A_STEP
    return COMPLETE


def unfinished_save(step: Path) -> str | None:
    """What a step dir lacks that its save writes last, in words, or None when it has it:
    verl v2's manager writes ckpt_contents.json after every piece (model/ under a role dir,
    or under the step for SFT), and DCP writes `.metadata` last, into Megatron's iter_N/
    itself or verl's dist_ckpt/ (under the step, a role, or a role's model/). Every
    dist_ckpt/ there must hold it; where another does, the one lacking it is named by its
    place ("actor/dist_ckpt"): verl saves actor/, then critic/, so a run stopped in between
    leaves one role's finished, and the step was offered as complete while reading that
    role refused it. A
    step of ours (its manifest there) or of a format mfsdp does not read (Megatron's legacy
    `mp_rank_NN/`, verl's FSDP shards: no `.metadata` is theirs to write) lacks nothing,
    except a Megatron torch_dist save without the metadata.json megatron-core writes last.
    A step whose role or DCP dir links out of it lacks nothing here: what is out there is
    not looked at, and such a step is marked as what it is (`linked_out_part`)."""
    if _is_file_followed(step / MANIFEST_FILE):
        return None
    holders = [step, *(step / role for role in ROLES)]
    dcps = _dcp_places(step)
    if any(leads_out(d, step) for d in dcps):
        return None
    if any(is_dir(d) and is_unfinished_torch_dist(d, children(d)) for d in dcps):
        return UNFINISHED_TORCH_DIST_LACKS
    if any(_is_foreign(holder) for holder in holders):
        return None
    if any(
        is_dir(holder / VERL_MODEL_DIR) and not os.path.lexists(holder / VERL_CONTENTS_FILE)
        for holder in holders
    ):
        return f"{VERL_CONTENTS_FILE}, which verl writes last"
    if not any(_has_metadata(d) for d in dcps):
        return f"{DCP_METADATA_FILE}, which a save writes last"
    lacking = [d for d in dcps if d.name == DIST_CKPT_DIR and is_dir(d) and not _has_metadata(d)]
    if lacking:
        return f"{DCP_METADATA_FILE} in {lacking[0].relative_to(step)}, which a save writes last"
    return None


def _has_metadata(dcp: Path) -> bool:
    """Whether DCP dir `dcp` holds the `.metadata` DCP writes last (any entry so named)."""
    return os.path.lexists(dcp / DCP_METADATA_FILE)


def _dcp_places(step: Path) -> list[Path]:
    """Where a step's DCP files may lie, by layout: in the step itself (Megatron's iter_N/),
    a role dir, and their `dist_ckpt/` and `model/dist_ckpt/` (verl's, ours)."""
    holders = [step, *(step / role for role in ROLES)]
    return [d for h in holders for d in (h, h / DIST_CKPT_DIR, h / VERL_MODEL_DIR / DIST_CKPT_DIR)]


def linked_out_part(step: Path) -> Path | None:
    """The first part of step dir `step` that a reader of the step follows and that is a
    link leading out of it, or None: a role dir, a `model/` or `dist_ckpt/` (under the step
    or a role; mfsdp's step, its manifest there, is read from its `dist_ckpt/` alone), or a
    file a DCP reader opens (`.metadata` and every data file it names, bound by their DCP
    dir as the reader bounds them: `_linked_out_dcp_file`; Megatron's iter_N/ holds its
    DCP files itself, with `_READ_MEGATRON_FILES`). Found by
    `leads_out`, so nothing outside is looked at, whatever lies at the link's target (a
    valid DCP there changes nothing): reading the step refuses the link, so no list offers
    the step and no resume picks it. Any other entry (a README linked in) is never opened by
    a reader and counts for nothing: a note linked into the newest step hid it from every
    list.

    Each part is one `lstat` by its name, each DCP dir (one holding a `.metadata`) one
    listing more (the entries' types tell the links), and only a link is walked
    (`_part_kind`, `_linked_out_dcp_file`). `list_complete_steps` asks this of every step of
    a run, so a run of thousands of steps costs a few calls per step: a walk from the root
    of each place, for every step, made listing a long run's steps take minutes on a shared
    filesystem, where each file call is a round trip
    (`test_listing_a_run_of_many_steps_lists_each_dcp_dir_once` bounds it). The step dir
    itself may be a link (`confining_dir`: a step moved to another disk is read where it
    leads); our manifest linked out is named by reading the run
    (`refuse_manifest_leading_out`)."""
    if os.path.lexists(step / MANIFEST_FILE):
        return _our_linked_out_part(step)
    for holder in (step, *(step / role for role in ROLES)):
        kind, through = (_DIR, False) if holder == step else _part_kind(holder, step, False)
        if kind == _OUT:
            return holder
        if kind != _DIR:
            continue
        model, model_through = _part_kind(holder / VERL_MODEL_DIR, step, through)
        if model == _OUT:
            return holder / VERL_MODEL_DIR
        places = [(holder, through), (holder / DIST_CKPT_DIR, through)]
        if model == _DIR:
            places.append((holder / VERL_MODEL_DIR / DIST_CKPT_DIR, model_through))
        for dcp, dcp_through in places:
            linked = _linked_out_dcp(dcp, step, dcp_through, megatron=dcp == step)
            if linked is not None:
                return linked
    return None


# The files of a DCP dir a reader opens beside the `.metadata` DCP writes last and the data
# files it names: in Megatron's torch_dist iter_N/ the files megatron-core reads; rank 0's
# first data file is one `.metadata` names in every save (`_linked_out_dcp_file`).
_READ_MEGATRON_FILES = (LEGACY_COMMON_FILE, TORCH_DIST_MARKER)
_RANK_0_DATA_FILE = "__0_0.distcp"
_OUT, _DIR, _FILE = "out", "dir", "file"


def _our_linked_out_part(step: Path) -> Path | None:
    """`linked_out_part` of mfsdp's step (its manifest there): its reader reads its state
    from `dist_ckpt/` alone."""
    return _linked_out_dcp(step / DIST_CKPT_DIR, step, False, megatron=False)


def _linked_out_dcp(dcp: Path, step: Path, through: bool, megatron: bool) -> Path | None:
    """`dcp` (a place of `step` DCP files may lie) where it links out of `step`, else the
    first file a reader opens in it that links out of `dcp` (`_linked_out_dcp_file`); None
    for the rest (`through`: as `_part_kind` takes it)."""
    kind = _DIR if dcp == step else _part_kind(dcp, step, through)[0]
    if kind == _OUT:
        return dcp
    if kind != _DIR:
        return None
    return _linked_out_dcp_file(dcp, megatron)


def _linked_out_dcp_file(dcp: Path, megatron: bool) -> Path | None:
    """The first file of DCP dir `dcp` that a reader opens and that links out of `dcp`,
    `.metadata` first, then by name; None where none does or `dcp` holds no `.metadata` (no
    DCP dir a reader opens). The bound is `dcp` itself, as every reader's: `.metadata` is
    opened inside its own dir (`load_metadata`) and each data file through a store rooted
    at the DCP dir (`LocalByteStore`: "symlink points outside the checkpoint's dist_ckpt/"),
    so a data file linked to a dir beside `dist_ckpt/` in the same step is refused when
    read, and a list bounding it by the step offered that step, and resume took it.

    Every data file `.metadata` names counts, not rank 0's first alone (a step whose
    `__1_0.distcp` linked out was offered, resumed, and refused when read), and only those:
    an entry it never names (an old rank's leftover `x.distcp`, a note) is never opened,
    and counting it hid a step that reads. One lstat of `.metadata` and one listing of the
    dir: the entries' types tell the links, and only a link is walked (`leads_out`). Only a
    dir one of whose entries links out has its `.metadata` read (`_named_by_metadata`), and
    not even then where that entry is rank 0's first data file, which `.metadata` always
    names, so listing a run reads no `.metadata` of a step whose files stay in it. A DCP dir
    not to be listed is left for reading it to name."""
    metadata = dcp / DCP_METADATA_FILE
    try:
        mode = os.lstat(metadata).st_mode
    except OSError:
        return None
    if stat.S_ISLNK(mode) and leads_out(metadata, dcp):
        return metadata
    try:
        with os.scandir(dcp) as entries:
            links = [e.name for e in entries if e.name != DCP_METADATA_FILE and e.is_symlink()]
    except OSError:
        return None
    out = [name for name in sorted(links, key=natural_order) if leads_out(dcp / name, dcp)]
    if megatron:
        read = next((name for name in out if name in _READ_MEGATRON_FILES), None)
        if read is not None:
            return dcp / read
    if _RANK_0_DATA_FILE in out:
        return dcp / _RANK_0_DATA_FILE
    named = _named_by_metadata(dcp) if out else frozenset()
    return next((dcp / name for name in out if named is None or name in named), None)


def _named_by_metadata(dcp: Path) -> frozenset[str] | None:
    """The entries of DCP dir `dcp` holding the data files its `.metadata` names (the first
    part of each relative path), or None where `.metadata` does not read: reading the DCP
    refuses it then, whatever its links, so each link out counts."""
    try:
        storage = load_metadata(dcp / DCP_METADATA_FILE).storage_data
    except (CheckpointFileError, OSError, ValueError):  # UnsafeMetadataError is a ValueError
        return None
    if not isinstance(storage, dict):
        return None
    paths = (str(getattr(info, "relative_path", "")) for info in storage.values())
    return frozenset(Path(path).parts[0] for path in paths if Path(path).parts)


def _part_kind(path: Path, step: Path, through: bool) -> tuple[str | None, bool]:
    """What the part `path` of `step` is (_OUT where a link on the way leads out of `step`,
    _DIR, _FILE, or None where nothing is there to read) and whether a link inside `step`
    lies on the way to it. One lstat tells, while no link lies on the way (`through`
    False): only a link (or a path through one) is walked, without looking outside
    (`leads_out`). A part that cannot be stat'ed is left for reading it to name."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None, through
    if not (through or stat.S_ISLNK(mode)):
        return (_DIR if stat.S_ISDIR(mode) else _FILE), False
    if leads_out(path, step):
        return _OUT, True
    return (_DIR if is_dir(path) else _FILE), True


def linked_out_said(step: Path, part: Path) -> str:
    """What a step dir whose `part` links out of it is, in words naming the part."""
    return f"has {part.relative_to(step)} linking out of it, which reading it refuses"


def linked_out_steps_said(run: Path, linked: list[str]) -> str:
    """Step dirs `linked` of `run` (oldest first, each one a part of which links out of it),
    in words: the newest by its path, with the part that links out."""
    newest = run / linked[-1]
    part = linked_out_part(newest)
    said = linked_out_said(newest, part) if part is not None else "has a part linking out of it"
    if len(linked) == 1:
        return f"{newest} {said}"
    return f"{newest_of(linked)} have parts linking out of them ({newest} {said})"


def unfinished_said(run: Path, unfinished: list[str]) -> str:
    """Step dirs `unfinished` of `run` (oldest first, each a save `step_states` finds did
    not finish), in words: the newest by its path, with what it lacks that its save writes
    last (`unfinished_save`) or that it is empty. A list of the steps to give named such a
    save by its name alone, and a refusal naming the complete ones called the older step
    "the newest" without it."""
    newest = run / unfinished[-1]
    why = f"holds no {MANIFEST_FILE}, which mfsdp writes last"  # a step of mfsdp's run
    try:
        lacks = unfinished_save(newest) if children(newest) else "nothing"
    except (CheckpointPathError, CheckpointFileError):
        lacks = None
    if lacks == "nothing":
        why = "is empty"
    elif lacks is not None:
        why = f"holds no {lacks}"
    if len(unfinished) == 1:
        return f"{newest} is a save that did not finish (it {why})"
    return f"{newest_of(unfinished)} are saves that did not finish ({newest} {why})"


def _is_foreign(holder: Path) -> bool:
    """`holder` is a dir in a format `refuse_foreign_format` names (not ours to judge)."""
    if not is_dir(holder):
        return False
    try:
        refuse_foreign_format(holder, children(holder))
    except ForeignFormatError:
        return True
    return False


def newest_of(names: list[str], older: int = 0) -> str:
    """The last MAX_RUNS_LISTED of `names` (steps, oldest first), after `(+N older)` when
    more were left out (`older` more, never looked at, before `names`): `first_of` turned
    around, since the newest steps are the ones a user resumes or names, and older ones are
    what keep_last removes first."""
    older += max(0, len(names) - MAX_RUNS_LISTED)
    shown = ", ".join(names[-MAX_RUNS_LISTED:])
    return f"(+{older} older) {shown}" if older > 0 else shown


def is_ours(step: Path) -> bool:
    """A step mfsdp wrote: it has a manifest, or a sibling step of its run has one (then a
    missing manifest is damage to report, not a sign of verl, whose steps never have one).
    Any entry named manifest.json counts: a FIFO or a link there is a damaged mfsdp step,
    which validate then refuses, not a verl step to read without one."""
    return os.path.lexists(step / MANIFEST_FILE) or _holds_our_step(step.parent)


def step_dirs(run: Path, names: list[str]) -> dict[str, Path]:
    """Step dirs of any layout in a run dir: {name: path}."""
    return {
        n: run / n
        for n in names
        if (parse_step_dir_name(n) is not None or is_megatron_step_name(n)) and is_dir(run / n)
    }


def natural_order(name: str) -> list:
    """Sort key ordering names by their numbers as numbers: a string sort puts
    `global_step_10` before `global_step_9`, so a list cut to its last (newest) entries
    would drop the newest step. The split's odd parts are its runs of ASCII digits, so
    those are the numbers, by place: other digits (a superscript two, Arabic-Indic ones)
    stay text, where `isdigit` sent them to `int`, which raised on them or compared one
    name's number with another's text, and sorting a run dir holding one failed."""
    parts = re.split(r"([0-9]+)", name)
    return [int(part) if index % 2 else part for index, part in enumerate(parts)]
