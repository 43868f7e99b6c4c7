"""Runs found from a path: the runs a directory holds, and the checkpoint a path lies in.

`mfsdp demo --out runs/demo` writes the run runs/demo/sft, so a dir given may hold runs
rather than be one; and an output path inside a checkpoint (or at a step a run will save)
would add unlisted files to it or replace it. Resolution and every command that writes
an output ask here.
"""

from __future__ import annotations

import os
from pathlib import Path

from mfsdp_ckpt.format import hf_trainer
from mfsdp_ckpt.format.dir_entries import children, is_dir, is_file
from mfsdp_ckpt.format.layout import (
    BRIDGE_TRACKER_FILE,
    DCP_METADATA_FILE,
    DIST_CKPT_DIR,
    MANIFEST_FILE,
    ROLES,
    TMP_STEP_RE,
    TRACKER_FILE,
    VERL_CONTENTS_FILE,
    is_megatron_step_name,
    parse_step_dir_name,
)
from mfsdp_ckpt.format.run_steps import step_dirs


def runs_held(directory: str | os.PathLike, names: list[str] | None = None) -> list[Path]:
    """The runs of any layout that `directory` holds as its sub-dirs (a tracker, step dirs,
    or the HF Trainer's checkpoint-N in them): `mfsdp demo --out runs/demo` writes the run
    runs/demo/sft. Hidden dirs and dirs this user cannot list are left out."""
    given = Path(directory)
    runs = []
    for name in children(given) if names is None else names:
        child = given / name
        if not is_dir(child) or name.startswith("."):
            continue
        try:
            child_names = os.listdir(child)
        except OSError:
            continue
        trackers = (TRACKER_FILE, BRIDGE_TRACKER_FILE)
        if (
            any(t in child_names for t in trackers)
            or step_dirs(child, child_names)
            or any(
                hf_trainer.checkpoint_number(n) is not None and is_dir(child / n)
                for n in child_names
            )
        ):
            runs.append(child)
    return runs


# how many names `runs_one_level_down` lists in all: a dir of runs holds a few; a data or
# home dir given by mistake is not walked further
MAX_NAMES_LISTED = 512


def runs_one_level_down(
    directory: str | os.PathLike, names: list[str], skip: list[Path]
) -> list[Path]:
    """The runs held by the sub-dirs of `directory` (named `names`) that are not themselves
    in `skip` (the runs and checkpoints `directory` holds): after `mfsdp demo --out
    runs/demo` and a run into runs/sft_tiny, `runs` holds two runs, runs/demo/sft among
    them, where counting its own sub-dirs alone found "one run". Bounded: past
    MAX_NAMES_LISTED names of sub-dirs listed in all, the runs found so far."""
    given = Path(directory)
    found: list[Path] = []
    budget = MAX_NAMES_LISTED
    for name in sorted(names):
        child = given / name
        if name.startswith(".") or child in skip or not is_dir(child):
            continue
        try:
            child_names = os.listdir(child)
        except OSError:
            continue
        budget -= len(child_names)
        if budget < 0:
            break
        found += runs_held(child, child_names)
    return found


def checkpoint_containing(path: str | os.PathLike, *, run_itself: bool = True) -> Path | None:
    """The checkpoint that `path` is or lies inside (a step, role or DCP dir, or, for `path`
    itself unless `run_itself` is False, a run or a dir holding a dist_ckpt); None if none.

    Writing an export there would add unlisted files to a checkpoint, or, with --overwrite,
    replace one (`--out RUN/global_step_40`): callers refuse such output paths. A new dir
    beside the steps of a run (`RUN/hf`) is fine. `path` need not exist; what exists of it
    and its ancestors decides. A training run's run_dir is a run by design (`run_itself`
    False), but never a step of one.
    """
    current = Path(os.path.abspath(path))
    for candidate in (current, *current.parents):
        if _is_checkpoint_dir(candidate, is_target=run_itself and candidate == current):
            return candidate
    return None


def checkpoint_as_given(path: str | os.PathLike, *, run_itself: bool = True) -> Path | None:
    """`checkpoint_containing(path)` named for a message as `path` was given: relative
    where `path` was (`runs/demo/sft` for `runs/demo/sft/global_step_80`), as README
    promises of every path an error names; absolute where `path` was."""
    inside = checkpoint_containing(path, run_itself=run_itself)
    if inside is None:
        return None
    return named_as_given(inside, path)


def named_as_given(found: Path, path: str | os.PathLike) -> Path:
    """`found`, the absolute path of `path` or of a dir above it, as `path` names it: the
    part of a relative `path` that leads there (`.` for the working dir); `found` itself
    where `path` is absolute."""
    if os.path.isabs(path):
        return found
    return Path(os.path.relpath(found))


def unsaved_step_words(path: str | os.PathLike, inside: Path) -> str | None:
    """How `path` relates to `inside`, what `checkpoint_containing` found, when that is no
    checkpoint on disk but the name of a step of a run not saved (yet): `RUN/global_step_999`
    is refused because the run's saves write there, and "lies inside the checkpoint
    RUN/global_step_999" named a checkpoint that is not there. None when `inside` exists:
    the caller says it is, or lies in, a checkpoint."""
    if os.path.lexists(inside):
        return None
    shown = named_as_given(inside, path)
    where = "is" if Path(os.path.abspath(path)) == inside else f"lies in {shown}, which is"
    return (
        f"{where} the name of a checkpoint step of the run {shown.parent} (its saves write"
        " there; none is saved there now)"
    )


def _is_checkpoint_dir(candidate: Path, is_target: bool) -> bool:
    name = candidate.name
    step_like = bool(
        parse_step_dir_name(name) is not None
        or TMP_STEP_RE.match(name)
        or is_megatron_step_name(name)
    )
    trackers = (TRACKER_FILE, BRIDGE_TRACKER_FILE)
    if step_like and any(is_file(candidate.parent / tracker) for tracker in trackers):
        return True  # a step of a run, saved or still to come
    if not is_dir(candidate):
        return False
    markers = (DCP_METADATA_FILE, MANIFEST_FILE, VERL_CONTENTS_FILE, hf_trainer.TRAINER_STATE_FILE)
    if any(is_file(candidate / marker) for marker in markers):
        return True
    if step_like and any(is_dir(candidate / part) for part in (DIST_CKPT_DIR, *ROLES)):
        return True
    return is_target and (
        any(is_file(candidate / tracker) for tracker in trackers)
        or is_dir(candidate / DIST_CKPT_DIR)
    )
