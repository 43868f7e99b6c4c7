"""Any level of any known layout, given as a path, resolved to one checkpoint's paths.

A run (following its tracker), a step, verl's role dirs, a `dist_ckpt/`, Megatron's
`iter_N/`, the HF Trainer's output or a dir holding one run all resolve to a
`CheckpointPaths` here, and `checkpoint.resume` to the checkpoint it names. Every command
that reads a checkpoint asks here, so a path means the same checkpoint to all of them;
the layouts' names are in `layout`, what a refused path is in `path_refusals` and
`foreign_formats`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import replace
from pathlib import Path

from mfsdp_ckpt.check.printable import first_of
from mfsdp_ckpt.errors import MfsdpError
from mfsdp_ckpt.format import hf_trainer, torchtitan
from mfsdp_ckpt.format.bridge_trackers import other_tracker_note, other_tracker_suffix
from mfsdp_ckpt.format.dcp_dir_paths import from_dcp_dir, megatron_kind
from mfsdp_ckpt.format.dir_entries import children, is_dcp, is_dir, is_file, leads_out
from mfsdp_ckpt.format.finding_runs import runs_held, runs_one_level_down
from mfsdp_ckpt.format.foreign_formats import (
    foreign_format_line,
    refuse_foreign_format,
    refuse_torchtitan_folder,
    refuse_weights_without_config,
)
from mfsdp_ckpt.format.layout import (
    BARE_DCP,
    BRIDGE_TRACKER_FILE,
    DEFAULT_ROLE,
    DIST_CKPT_DIR,
    HF_ASSETS_DIR,
    ITER_DIR_RE,
    MANIFEST_FILE,
    MAX_RUNS_LISTED,
    MEGATRON_BRIDGE,
    MEGATRON_ITER_PREFIX,
    MEGATRON_RELEASE_DIR,
    MFSDP,
    NON_PERSISTENT_DIR,
    ROLES,
    STEP_DIR_PREFIX,
    TMP_STEP_RE,
    TMP_STEP_SUFFIX,
    TRACKER_FILE,
    VERL_CONTENTS_FILE,
    VERL_MODEL_DIR,
    CheckpointPathError,
    CheckpointPaths,
    DamagedRunDirError,
    DamagedTrackerError,
    ForeignFormatError,
    IncompleteCheckpointError,
    UnfinishedTrackedStepError,
    is_megatron_step_name,
    iter_step,
    looks_like_hf_model,
    noted,
    parse_step_dir_name,
    step_dir,
)
from mfsdp_ckpt.format.left_step_names import refuse_left_step
from mfsdp_ckpt.format.manifest_owner import is_mfsdp_manifest
from mfsdp_ckpt.format.newer_steps import newer_than_tracked
from mfsdp_ckpt.format.path_refusals import (
    check_is_dir,
    hf_model_dir_refusal,
    missing_dcp,
    not_a_checkpoint,
    refuse_pieces_linked_out,
    refuse_url,
)
from mfsdp_ckpt.format.run_steps import (
    COMPLETE,
    LINKED_OUT,
    NOT_A_STEP,
    confining_dir,
    incomplete_step,
    is_ours,
    linked_out_part,
    linked_out_steps_said,
    list_complete_steps,
    manifest_damage,
    natural_order,
    newest_of,
    read_bridge_tracker,
    read_tracker_text,
    refuse_manifest_leading_out,
    refuse_tracked_step_holding_no_save,
    resume_refusal,
    resume_step,
    step_dirs,
    step_states,
    steps_here,
    unfinished_said,
    untracked_step_note,
)
from mfsdp_ckpt.format.unfinished_steps import (
    other_steps_said,
    refuse_unfinished_step,
    step_unfinished_said,
)
from mfsdp_ckpt.format.verl_contents import read_verl_contents, refuse_saved_without_model
from mfsdp_ckpt.storage.byte_store import CheckpointFileError

# What each path resolved to in a `resolved_once` block: (absolute path, role) -> paths.
_RESOLVED: ContextVar[dict[tuple[str, str | None], CheckpointPaths] | None] = ContextVar(
    "_RESOLVED", default=None
)


# The directory the checkpoint being resolved must stay in (`confining_dir`): the path the
# user gave, or a step of a run it names. Set while `resolve_checkpoint` runs.
_CONFINING: ContextVar[Path | None] = ContextVar("_CONFINING", default=None)


@contextlib.contextmanager
def resolved_once() -> Iterator[None]:
    """In the block, a path resolves once (`resolve_checkpoint`): asked again, with the same
    role, it is the same checkpoint. A command reads a checkpoint in several places (which
    export it is, its removal stamps, the export itself); given the dir of a run still
    saving, each of them resolved its newest step anew, and a save committed between two
    of them had one read step N and another step N+1. A block inside another shares the
    outer one's resolutions."""
    if _RESOLVED.get() is not None:
        yield
        return
    token = _RESOLVED.set({})
    try:
        yield
    finally:
        _RESOLVED.reset(token)


def checkpoint_to_resume(run_dir: str | os.PathLike, resume: str) -> CheckpointPaths | None:
    """The checkpoint `checkpoint.resume` names for a run in `run_dir`: `auto`, the step
    `resume_step` takes (None when there is none); `disable`, None; else the path given.
    The ranks load it and the launching process (no torch) checks it first, so both ask
    here and name the same checkpoint."""
    if resume == "disable":
        return None
    if resume == "auto":
        step = resume_step(run_dir)
        return None if step is None else resolve_checkpoint(step_dir(run_dir, step))
    return resolve_checkpoint(resume)


def resolve_checkpoint(
    path: str | os.PathLike, *, role: str | None = None, _depth: int = 0
) -> CheckpointPaths:
    """Resolve any level of any known layout to one checkpoint's paths.

    Accepts a run dir (follows the tracker), a step dir, verl's `actor/` or `actor/model/`,
    a `dist_ckpt/`, Megatron-LM's `iter_NNNNNNN/` or `release/`, or a directory holding
    exactly one run. `role` picks verl's actor (default) or critic. Raises
    CheckpointPathError with one line (what was looked for, or which choice to make).
    In a `resolved_once` block, a path resolved before is that same checkpoint.
    """
    if role is not None and role not in ROLES:
        raise CheckpointPathError(f"--role {role!r}: choose {' or '.join(ROLES)}")
    refuse_url(path)
    resolved = _RESOLVED.get() if _depth == 0 else None
    key = (os.path.abspath(path), role)
    if resolved is not None and key in resolved:
        return resolved[key]
    given = _with_real_names(Path(path))
    check_is_dir(given)
    refuse_left_step(given)
    outer = _CONFINING.get() if _depth else None
    token = _CONFINING.set(given if outer is None else _confining(outer, given))
    try:
        paths = _resolve_dir(given, role, _depth)
    except (IncompleteCheckpointError, CheckpointPathError) as err:
        if _depth == 0:  # a step a run dir chose is told under its tracker
            refuse_unfinished_step(given, err)
        raise
    finally:
        _CONFINING.reset(token)
    refuse_pieces_linked_out(confining_dir(given, paths.root), paths)  # a step: its own
    if role is not None and paths.role is None:
        raise CheckpointPathError(
            f"--role {role}: {given} is {'an' if paths.kind in (MFSDP, hf_trainer.KIND) else 'a'}"
            f" {paths.kind} checkpoint, which has no"
            f" {'/ '.join(ROLES)}/ roles"
        )
    if resolved is not None:
        resolved[key] = paths
    return paths


def _confining(outer: Path, given: Path) -> Path:
    """`confining_dir` of a dir a level above chose (a run's step: its own), or `outer`
    where the way to it leads out (reading the checkpoint names that link)."""
    try:
        return confining_dir(outer, given)
    except CheckpointFileError:
        return outer


def _refuse_leading_out(dcp: Path) -> None:
    """CheckpointFileError ("resolves outside") when a link on the way to `dcp` leads out of
    the checkpoint: nothing out there is listed or judged ("did not finish", "137
    file(s)"), and every route names the link, whatever is at its target."""
    root = _CONFINING.get()
    if root is not None and leads_out(dcp, root):
        raise CheckpointFileError(f"{dcp}: resolves outside {root}")


def _with_real_names(given: Path) -> Path:
    """`given` spelt so that its last parts name the directories themselves: the layout is
    told by names (`global_step_80`, `dist_ckpt`), and `.` (run from inside a step dir) or
    `dist_ckpt/..` named neither, so a step of ours read as a bare dist_ckpt (no step, no
    manifest: "file hashes were not checked"). Collapsed lexically where that names the
    same directory, else through the real path (a symlink before the `..`)."""
    if given.parts and ".." not in given.parts:
        return given  # pathlib drops `.` inside a path: only `.` alone (no parts) and `..` stay
    for candidate in (Path(os.path.normpath(given)), Path(os.path.abspath(given))):
        if candidate.name not in ("", ".", ".."):
            break
    try:
        if os.path.samefile(candidate, given):
            return candidate
        return given.resolve(strict=True)
    except OSError:
        return given  # missing or unreadable: the checks that follow name it as given


def _resolve_dir(given: Path, role: str | None, _depth: int) -> CheckpointPaths:
    """What the directory `given` is, told by the names in it. The tests run from the most
    specific to the most general, since a later one also matches what an earlier one claims:
    another tool's format is refused first (it would otherwise be misread as ours or called
    no checkpoint), then the DCP dir itself, then dirs that hold one (a migrated verl role
    dir holds a dist_ckpt/ too, so it comes before a step's), then role parents, Hugging
    Face Trainer output and model dirs, and last a run, whose steps are looked for one level
    down. A parent of runs is looked for only in the path given (`_depth` 0): a dir that a
    level above chose (a run's step, a role) is a checkpoint or named as none, never
    searched again for runs below it."""
    names = children(given)
    refuse_foreign_format(given, names)
    if is_dcp(given):
        return _ours_where_manifest_beside(from_dcp_dir(given, role))
    if ITER_DIR_RE.match(given.name):  # Megatron saves its DCP files into iter_N/ itself
        _refuse_leading_out(given)
        raise missing_dcp(given)
    if VERL_CONTENTS_FILE in names and DIST_CKPT_DIR in names and VERL_MODEL_DIR in names:
        return _from_migrated_role_dir(given, role)
    if DIST_CKPT_DIR in names and is_dcp(given / DIST_CKPT_DIR):
        return _ours_where_manifest_beside(from_dcp_dir(given / DIST_CKPT_DIR, role))
    if given.name == DIST_CKPT_DIR or (
        DIST_CKPT_DIR in names and is_dir(given / DIST_CKPT_DIR) and not _holds_roles(given)
    ):
        dcp = given if given.name == DIST_CKPT_DIR else given / DIST_CKPT_DIR
        if _our_manifest_beside(dcp) or (
            parse_step_dir_name(dcp.parent.name) is not None and is_ours(dcp.parent)
        ):  # ours: validate names what the manifest lacks
            return _ours_where_manifest_beside(from_dcp_dir(dcp, role))
        _refuse_leading_out(dcp)
        refuse_foreign_format(dcp, children(dcp))
        raise missing_dcp(dcp)
    if VERL_CONTENTS_FILE in names or (
        VERL_MODEL_DIR in names and is_dir(given / VERL_MODEL_DIR / DIST_CKPT_DIR)
    ):
        return _from_v2_role_dir(given, role)
    present_roles = [r for r in ROLES if r in names and is_dir(given / r)]
    if present_roles:
        return _from_role_parent(given, present_roles, role)
    trainer_run = _from_hf_trainer_run(given, names)
    if trainer_run is not None:
        return trainer_run
    if looks_like_hf_model(names):
        raise hf_model_dir_refusal(given)
    models = [n for n in names if hf_trainer.MODEL_DCP_RE.match(n) and is_dir(given / n)]
    if models:
        return _from_hf_trainer_checkpoint(given, models)
    refuse_weights_without_config(given, names)
    run = _from_run_dir(given, names, role)
    if run is not None:
        return run
    accelerate = hf_trainer.newest_accelerate_save(given, names)
    if accelerate is not None:  # Accelerate's checkpoints/checkpoint_<i>, or the project
        save, note = accelerate
        try:
            paths = resolve_checkpoint(save, _depth=1)
        except (CheckpointPathError, IncompleteCheckpointError) as err:
            raise type(err)(f"{err} ({note})") from None
        return noted(paths, note)
    refuse_torchtitan_folder(given, names)
    if _depth == 0:
        return _from_parent_of_runs(given, names, role)
    raise not_a_checkpoint(given)


def _ours_where_manifest_beside(paths: CheckpointPaths) -> CheckpointPaths:
    """`paths` as a step of ours where they are a bare `dist_ckpt/` beside a manifest.json:
    a step copied under a name that is no step's (`best/`, `ck/`) is ours whatever it is
    called, so its manifest is read by the rule of a `global_step_N`, by every reader
    (validate, inspect, export, a resume): damage refused naming the file, a newer mfsdp's
    "upgrade mfsdp", exit 1. `from_dcp_dir` takes such a step for ours only where its
    manifest reads; one damaged or from a newer mfsdp left it a bare dist_ckpt whose file
    hashes nothing checked, and validate --deep passed flipped tensor bytes. Another
    tool's manifest.json there leaves it bare (`manifest_owner`)."""
    if paths.kind != BARE_DCP or not _our_manifest_beside(paths.dist_ckpt):
        return paths
    step = paths.dist_ckpt.parent
    return replace(paths, step_dir=step, run_dir=step.parent, kind=MFSDP)


def _our_manifest_beside(dcp: Path) -> bool:
    """Whether `dcp` is a `dist_ckpt/` beside a manifest.json mfsdp wrote, damaged or not."""
    manifest = dcp.parent / MANIFEST_FILE
    return dcp.name == DIST_CKPT_DIR and os.path.lexists(manifest) and is_mfsdp_manifest(manifest)


def _holds_roles(directory: Path) -> bool:
    return any(is_dir(directory / r) for r in ROLES)


def _from_hf_trainer_checkpoint(checkpoint: Path, models: list[str]) -> CheckpointPaths:
    """A dir holding Accelerate's `pytorch_model_fsdp_K/` (the Trainer's checkpoint-N): the
    one model's DCP; with several (a run that prepared several models) the user picks."""
    if len(models) > 1:
        shown = first_of([f"{m}/" for m in sorted(models, key=natural_order)], MAX_RUNS_LISTED)
        raise CheckpointPathError(
            f"{checkpoint}: holds {shown} (one per model Accelerate prepared); give the one to read"
        )
    dcp = checkpoint / models[0]
    if not is_dcp(dcp):
        _refuse_leading_out(dcp)
        raise missing_dcp(dcp)
    return from_dcp_dir(dcp, None)


def _from_hf_trainer_run(run: Path, names: list[str]) -> CheckpointPaths | None:
    """The HF Trainer's output dir: its newest checkpoint-N, the one
    `resume_from_checkpoint=True` resumes (transformers' get_last_checkpoint: the largest
    N). None when `run` holds no checkpoint-N dir, or is a run of another layout (a
    tracker, step dirs). A Hugging Face model beside the checkpoints (a final save_model)
    is named in a note."""
    checkpoints: dict[str, int] = {}
    for name in names:
        number = hf_trainer.checkpoint_number(name)
        if number is not None and is_dir(run / name):
            checkpoints[name] = number
    trackers = (TRACKER_FILE, BRIDGE_TRACKER_FILE)
    if not checkpoints or any(t in names for t in trackers) or step_dirs(run, names):
        return None
    newest = max(checkpoints.values())
    tied = sorted(n for n, number in checkpoints.items() if number == newest)
    if len(tied) > 1:
        raise CheckpointPathError(f"{run}: {' and '.join(tied)} are both step {newest}; give one")
    target = run / tied[0]
    others = sorted((n for n in checkpoints if n != tied[0]), key=natural_order)
    context = f"{tied[0]} is the newest checkpoint of {run}, the one resume_from_checkpoint=True"
    context += " resumes" + (f"; other checkpoint dirs here: {newest_of(others)}" if others else "")
    if not children(target):
        raise IncompleteCheckpointError(f"{target}: empty, a save that did not finish ({context})")
    try:
        paths = resolve_checkpoint(target, _depth=1)
    except (CheckpointPathError, IncompleteCheckpointError) as err:
        raise type(err)(f"{err} ({context})") from None
    also_model = (
        f"{run} holds a Hugging Face model too (config.json and weights, a final save);"
        f" reading its newest training checkpoint, {tied[0]}"
    )
    return noted(paths, also_model if looks_like_hf_model(names) else None, run_dir=run)


def _from_v2_role_dir(role_dir: Path, role: str | None) -> CheckpointPaths:
    """verl v2's `actor/` (or an SFT step dir, which has no role level): with Megatron-FSDP
    every state is in model/dist_ckpt (the optimizer/ and extra/ dirs exist but are empty,
    though ckpt_contents.json lists them)."""
    dcp = role_dir / VERL_MODEL_DIR / DIST_CKPT_DIR
    if VERL_CONTENTS_FILE in children(role_dir):
        # a hostile or broken file is refused here, in one line
        refuse_saved_without_model(role_dir, read_verl_contents(role_dir), is_dcp(dcp))
    if not is_dcp(dcp):
        _refuse_leading_out(dcp)
        if is_dir(dcp):
            refuse_foreign_format(dcp, children(dcp))
        raise missing_dcp(dcp)
    return from_dcp_dir(dcp, role)


def _from_migrated_role_dir(role_dir: Path, role: str | None) -> CheckpointPaths:
    """A verl role dir (or SFT step) holding both layouts: verl's
    scripts/migrate_megatron_checkpoint_layout.py links the v2 split beside the pre-v2
    dist_ckpt/ and leaves that in place, and a v2 run that saves the step again rewrites
    only model/. verl then loads model/dist_ckpt (ckpt_contents.json marks the step v2, and
    it refuses the pre-v2 layout), so that is what is read; the note names what is not."""
    paths = _from_v2_role_dir(role_dir, role)
    left = (
        f"{role_dir / DIST_CKPT_DIR} (verl's pre-v2 layout) is left unread:"
        f" {VERL_CONTENTS_FILE} marks {role_dir} as v2, which verl loads from"
        f" {paths.dist_ckpt}"
    )
    return noted(paths, left)


def _from_role_parent(step: Path, present: list[str], role: str | None) -> CheckpointPaths:
    """A verl RL step dir: actor/ and maybe critic/; the actor unless `role` says otherwise."""
    chosen = role or (DEFAULT_ROLE if DEFAULT_ROLE in present else None)
    if chosen is None:
        raise CheckpointPathError(
            f"{step}: holds {', '.join(present)}/ only; pass --role {present[0]}"
        )
    if chosen not in present:
        raise CheckpointPathError(
            f"{step}: no {chosen}/ here (it holds {', '.join(p + '/' for p in present)})"
        )
    paths = resolve_checkpoint(step / chosen, role=chosen, _depth=1)
    return _with(paths, roles=tuple(present))


def _with(paths: CheckpointPaths, **changes) -> CheckpointPaths:
    """`paths` as a level above adds what it knows (the run dir, the roles beside it), its
    note kept as the level below wrote it (`noted` adds one)."""
    return replace(paths, **changes)


def _from_run_dir(run: Path, names: list[str], role: str | None) -> CheckpointPaths | None:
    """A run dir of any layout, or None when `run` is not one.

    Its tracker is read before its step dirs are listed: a save renames its step into place
    and then updates the tracker, so the step a tracker names is in any listing made after
    it was read. `names`, listed before, missed a step a run still saving committed
    meanwhile, and the tracker naming it read as a damaged run dir."""
    if BRIDGE_TRACKER_FILE not in names:
        tracked = read_tracker_text(run) if TRACKER_FILE in names else None
        return _from_tracked_run(run, names, role, TRACKER_FILE, tracked)
    tracked = None  # Megatron-Bridge resumes from latest_train_state.pt before the .txt
    try:
        tracked = read_bridge_tracker(run)
        paths = _from_tracked_run(run, names, role, BRIDGE_TRACKER_FILE, tracked)
    except (DamagedRunDirError, IncompleteCheckpointError) as err:
        suffix = other_tracker_suffix(run, tracked)
        if not suffix:
            raise
        if isinstance(err, DamagedTrackerError):
            raise type(err)(f"{err}{suffix}", err.tracker, err.run) from None
        raise type(err)(f"{err}{suffix}") from None
    if paths is None or tracked is None:
        return paths
    return noted(paths, other_tracker_note(run, tracked))


def _from_tracked_run(
    run: Path, names: list[str], role: str | None, tracker: str, tracked: str | None
) -> CheckpointPaths | None:
    """`_from_run_dir` once the tracker (`tracker`, naming `tracked`; None: none here) is
    read."""
    steps = step_dirs(run, names if tracked is None else children(run))
    if not steps:
        if tracked is not None:
            raise DamagedTrackerError(
                f"{run / tracker}: names {tracked!r}, but there is no step dir here",
                run / tracker,
            )
        unfinished = sorted(int(m.group(1)) for m in map(TMP_STEP_RE.match, names) if m)
        if unfinished:
            raise DamagedRunDirError(
                f"{run}: a save of step {unfinished[-1]} did not finish"
                f" ({STEP_DIR_PREFIX}{unfinished[-1]}"
                f"{TMP_STEP_SUFFIX}/ only); no complete checkpoint here"
            )
        return None
    ours = [n for n, p in steps.items() if is_file(p / MANIFEST_FILE)]
    if ours:
        return _from_our_run_dir(run, tracked)
    if tracked is not None:
        target = _tracked_step_dir(run, tracked, steps, tracker)
        try:
            paths = resolve_checkpoint(target, role=role, _depth=1)
        except (IncompleteCheckpointError, CheckpointPathError) as err:
            said = step_unfinished_said(target, err)
            if said is None and type(err) is CheckpointPathError:  # no save: its own line
                raise CheckpointPathError(f"{run / tracker} names {tracked!r}, but {err}") from None
            if said is None:
                raise
            raise UnfinishedTrackedStepError(
                f"{run / tracker} names {tracked!r}, but {said}{other_steps_said(run, target)}",
                run / tracker,
            ) from None
        unread = _newer_foreign(tracked, steps)
        readable = {name: step for name, step in steps.items() if name not in unread}
        newer = newer_than_tracked(run, tracked, readable, tracker)
        foreign = _foreign_note(run, tracked, unread, tracker)
        persistent = _non_persistent_note(run, tracked, target.name)
        return noted(paths, newer, foreign, persistent, run_dir=run)
    if len(steps) > 1:
        _refuse_choosing(run, sorted(steps, key=natural_order))
    (only,) = steps.values()
    paths = resolve_checkpoint(only, role=role, _depth=1)
    untracked = _untracked_note(run, only.name, paths)
    return noted(paths, untracked, _non_persistent_note(run, None, only.name), run_dir=run)


def _untracked_note(run: Path, name: str, paths: CheckpointPaths) -> str | None:
    """The one step dir of a run with no tracker is read all the same, but the trainer that
    wrote it would not resume it (`_untracked_loader`): a user validating the run before
    loading it there is told so. None for a step of mfsdp's own run (its run dir is read by
    `_from_our_run_dir`, which says what it reads)."""
    if paths.kind == MFSDP:
        return None
    missing, loader = _untracked_loader(run, [name], paths.kind)
    return f"{run} has no {missing}: {loader} would start from scratch; reading {name}"


def _untracked_loader(run: Path, names: list[str], kind: str | None) -> tuple[str, str]:
    """(the tracker missing, the load that finds none) for a run of another trainer whose
    step dirs `names` (of layout `kind`, None when not read yet: then each is asked, so the
    complete ones a refusal offers say whose run it is, not a newer save that did not
    finish and wrote none of Megatron-Bridge's files) have no tracker beside them:
    Megatron-LM's --load starts from random weights without the tracker (checkpointing.py
    `_load_base_checkpoint`), Megatron-Bridge's without its latest_train_state.pt or that
    file (`_get_checkpoint_iteration` returns -1), and verl's resume_mode=auto trains from
    scratch (`find_latest_ckpt_path` returns None)."""
    megatron = [name for name in names if is_megatron_step_name(name)]
    bridge = kind == MEGATRON_BRIDGE or (
        kind is None and any(megatron_kind(run / name) == MEGATRON_BRIDGE for name in megatron)
    )
    if megatron and bridge:
        return f"{BRIDGE_TRACKER_FILE} or {TRACKER_FILE}", f"Megatron-Bridge's load from {run}"
    if megatron:
        return TRACKER_FILE, f"Megatron-LM's --load {run}"
    return TRACKER_FILE, f"verl's resume from {run} (resume_mode=auto)"


def _newer_foreign(tracked: str, steps: dict[str, Path]) -> dict[str, str]:
    """{name: what it is} for the step dirs past the `tracked` step that hold a format
    mfsdp does not read (a Megatron-LM torch_dist save beside fsdp_dtensor ones). A step a
    part of which links out of it is not looked into (the newer-steps note names it)."""
    after = -1 if tracked == MEGATRON_RELEASE_DIR else int(tracked)
    found = {}
    for name in sorted(steps, key=natural_order):
        step = parse_step_dir_name(name) or iter_step(name)
        newer = step is not None and step > after and linked_out_part(steps[name]) is None
        line = foreign_format_line(steps[name]) if newer else None
        if line is not None:
            found[name] = line
    return found


def _foreign_note(run: Path, tracked: str, unread: dict[str, str], tracker: str) -> str | None:
    """The note naming newer step dirs mfsdp does not read: newer, but none to give a
    command here, so each is said with what it is and what reads it."""
    if not unread:
        return None
    named = "'release'" if tracked == MEGATRON_RELEASE_DIR else f"step {tracked}"
    listed = "; ".join(f"{name}/ is newer but {line}" for name, line in unread.items())
    return f"{run / tracker} names {named}; {listed}"


def _non_persistent_note(run: Path, tracked: str | None, reading: str) -> str | None:
    """A Megatron non-persistent save of `run` that its trainer's load would take instead
    of `reading`: the save goes to RUN/non_persistent/iter_N with a tracker of its own
    (Megatron-Bridge's latest_train_state.pt, else Megatron-LM's .txt), and a load with
    --non-persistent-ckpt-type global prefers it whenever its step is at least the run's
    tracked one (none counts as -1, `release` as 0: `_load_base_checkpoint`). mfsdp reads
    the run's own step, the one a load without that flag takes; the note names the other."""
    directory = run / NON_PERSISTENT_DIR
    names = children(directory) if is_dir(directory) else []
    if BRIDGE_TRACKER_FILE in names:
        tool, tracker, read = "Megatron-Bridge", BRIDGE_TRACKER_FILE, read_bridge_tracker
    elif TRACKER_FILE in names:
        tool, tracker, read = "Megatron-LM", TRACKER_FILE, read_tracker_text
    else:
        return None
    try:
        text = read(directory)
    except DamagedRunDirError as err:
        return f"{err} (a non-persistent save's tracker, which {tool}'s load reads first)"
    if text is None:  # removed since it was listed
        return None
    if text == MEGATRON_RELEASE_DIR:
        return f"{directory / tracker}: names 'release', which {tool}'s load refuses there"
    main = -1 if tracked is None else 0 if tracked == MEGATRON_RELEASE_DIR else int(tracked)
    step = int(text)
    if step < main:
        return None
    save = directory / f"{MEGATRON_ITER_PREFIX}{step:07d}"
    loader = f"{tool}'s load with --non-persistent-ckpt-type global"
    if not is_dir(save):
        return (
            f"{directory / tracker} names step {step}, but {save} is missing: {loader}"
            f" would fail on it; reading {reading}"
        )
    return (
        f"{directory / tracker} names step {step}: {loader} would take that non-persistent"
        f" save instead; reading {reading}: give {save} to read it"
    )


def _refuse_choosing(run: Path, names: list[str]) -> None:
    """Several step dirs and no tracker: the complete ones are offered to choose from, and
    those whose save did not finish, or a part of which links out of them, are named as
    such, not offered (given, one is refused). With none complete there is nothing to
    choose: a damaged run (exit 1)."""
    states = step_states(run, names)  # one look at every step dir, not one per name
    complete = [name for name in names if states[name] in (COMPLETE, NOT_A_STEP)]
    linked = [name for name in names if states[name] == LINKED_OUT]
    unfinished = [name for name in names if name not in complete and name not in linked]
    said = [
        unfinished_said(run, unfinished) if unfinished else None,
        linked_out_steps_said(run, linked) if linked else None,
    ]
    not_given = "; ".join(words for words in said if words) or None
    missing, loader = _untracked_loader(run, complete or names, None)
    if not complete:
        raise IncompleteCheckpointError(
            f"{run}: {len(names)} step dirs and no {missing}, and none is complete ({not_given})"
        )
    _refuse_unread_steps(run, len(names), complete, missing, not_given)
    newest = " (the newest complete one)" if names[-1] not in complete else ""
    shown = newest_of(complete) + newest + (f"; {not_given}" if not_given else "")
    raise CheckpointPathError(
        f"{run}: {len(names)} step dirs and no {missing}; give one of them ({shown}): none"
        f" is taken, as {loader} would start from scratch"
    )


def _refuse_unread_steps(
    run: Path, count: int, complete: list[str], missing: str, not_given: str | None
) -> None:
    """Complete step dirs none of which is in a format mfsdp reads (verl's FSDP backend's)
    were offered to choose from, and the one chosen was refused next: the newest one's
    refusal (what it is and what converts it) is said at once, as a run with a tracker
    says it, after the step dirs not given (`not_given`: saves that did not finish, steps
    linking out), which a newer one is: "the newest" named the older complete step alone.
    Newest first, and a step that is not refused so ends the search: a run of steps mfsdp
    reads costs one resolution."""
    refused: ForeignFormatError | None = None
    for name in reversed(complete):  # natural order: the newest last
        try:
            resolve_checkpoint(run / name, _depth=1)
        except ForeignFormatError as err:
            refused = refused or err
            continue
        except MfsdpError:
            return  # chosen, that step says what is wrong with it
        return
    if refused is not None:
        none = (
            f"; {not_given}; none of the complete ones is in a format mfsdp reads; the"
            " newest complete one"
            if not_given
            else ", none in a format mfsdp reads; the newest"
        )
        raise ForeignFormatError(f"{run}: {count} step dirs and no {missing}{none}: {refused}")


def _tracked_step_dir(
    run: Path, tracked: str, steps: dict[str, Path], tracker: str = TRACKER_FILE
) -> Path:
    if tracked == MEGATRON_RELEASE_DIR:
        candidates = [MEGATRON_RELEASE_DIR]
    elif tracker == BRIDGE_TRACKER_FILE:  # Megatron-Bridge writes iter_N/ only
        candidates = [f"{MEGATRON_ITER_PREFIX}{int(tracked):07d}"]
    else:
        candidates = [
            f"{STEP_DIR_PREFIX}{int(tracked)}",
            f"{MEGATRON_ITER_PREFIX}{int(tracked):07d}",
        ]
    for name in candidates:
        if name in steps:
            return steps[name]
    not_dirs = [name for name in candidates if os.path.lexists(run / name)]
    what = (
        f"{not_dirs[0]} is not a directory"
        if not_dirs
        else f"{' / '.join(c + '/' for c in _own_names(candidates, steps))} is missing"
    )
    raise DamagedTrackerError(
        f"{run / tracker}: names step {tracked!r}, but {what}{steps_here(run)}", run / tracker
    )


def _own_names(candidates: list[str], steps: dict[str, Path]) -> list[str]:
    """Of the names a tracked step may have (`global_step_N`, Megatron's `iter_N`), those
    of the layouts whose step dirs are here: a verl run's missing step is its
    `global_step_N/`, not "global_step_N/ / iter_N/"."""
    own = [
        name
        for name in candidates
        if any(is_megatron_step_name(n) == is_megatron_step_name(name) for n in steps)
    ]
    return own or candidates


def _from_our_run_dir(run: Path, tracked: str | None) -> CheckpointPaths:
    """mfsdp's run dir: the tracker's step, which must be complete (manifest written); with
    no tracker the newest complete step, as a resume takes it, said in a note."""
    if tracked is not None:
        if tracked == MEGATRON_RELEASE_DIR:
            raise DamagedTrackerError(
                f"{run / TRACKER_FILE}: expected a step number, found 'release'{steps_here(run)}",
                run / TRACKER_FILE,
            )
        target = step_dir(run, int(tracked))
        if not is_file(target / MANIFEST_FILE):
            refuse_tracked_step_holding_no_save(run, int(tracked))
            damage = manifest_damage(target) if is_dir(target) else None
            if damage is None:
                refuse_manifest_leading_out(target)
            what = (
                f"{target / MANIFEST_FILE} is {damage}"
                if damage
                else f"{target} {incomplete_step(target)}"
                if os.path.lexists(target)
                else f"{target} is missing"
            )
            raise DamagedTrackerError(
                f"{run / TRACKER_FILE}: names step {int(tracked)}, but {what}{steps_here(run)}",
                run / TRACKER_FILE,
            )
        return _our_step(run, target, resume_refusal(run))
    complete = list_complete_steps(run)
    if not complete:  # its steps each have a part linking out of them
        raise DamagedRunDirError(f"{run}: no step dir here is complete{steps_here(run)}")
    target = step_dir(run, complete[-1])
    return _our_step(run, target, untracked_step_note(run, target.name))


def _our_step(run: Path, target: Path, note: str | None) -> CheckpointPaths:
    """Step dir `target` of mfsdp's run dir `run`, read with `note` (what resume=auto does
    with the run, where that is worth a line)."""
    return CheckpointPaths(
        target / DIST_CKPT_DIR, target, run, MFSDP, hf_dir=target / HF_ASSETS_DIR, note=note
    )


def _from_parent_of_runs(given: Path, names: list[str], role: str | None) -> CheckpointPaths:
    """A directory holding runs (`runs_held`) or DCP dirs of their own (`import-hf --layout
    mcore` writes one): exactly one resolves to it, with a note; several are listed. Runs
    alone were counted, so a run beside such a checkpoint was "one run" (the other never
    named) and a dir holding only such a checkpoint was "not a checkpoint". Runs one level
    further down (`runs_one_level_down`: runs/demo/sft in runs/) count too: "one run" read
    runs/sft_tiny beside it; one found there alone is named, not read. A torchtitan dump
    folder's steps (`checkpoint/step-N/`) are its checkpoints as they are its `checkpoint/`
    folder's: steps holding names mfsdp reads made the dump folder "not a checkpoint"."""
    dcp_dirs = [
        given / name
        for name in names
        if not name.startswith(".") and is_dir(given / name) and is_dcp(given / name)
    ] + torchtitan.dump_folder_steps(given, names)
    runs = runs_held(given, names)
    held = runs + [path for path in dcp_dirs if path not in runs]
    deeper = runs_one_level_down(given, names, held)
    if not held and not deeper:
        raise not_a_checkpoint(given)
    what = "checkpoint" if dcp_dirs else "run"
    if len(held) + len(deeper) > 1:
        shown = first_of(held + deeper, MAX_RUNS_LISTED)
        count = len(held) + len(deeper)
        raise CheckpointPathError(f"{given}: holds {count} {what}s; give one of them ({shown})")
    if not held:
        raise CheckpointPathError(
            f"{given}: not a checkpoint; it holds the run {deeper[0]} a level further down:"
            " give that"
        )
    paths = resolve_checkpoint(held[0], role=role, _depth=1)
    return noted(paths, f"{given} holds one {what}: reading {held[0]}")
