"""Which old steps a run removes after a save (`checkpoint.keep_last`), and how.

A run dir holds the user's days of compute, and not only what the run wrote there: a
step dir moved to another disk and linked back, a copy made by hand. So pruning removes
only what this run's saves make, exactly as listed:

* only a real directory named `global_step_N` (`layout.parse_step_dir_name`: no
  `global_step_06`) that holds a manifest counts as a step and may be removed (one without
  manifest only when older than every step kept: below);
* a symlink is never followed and never removed, and does not count toward `keep_last`:
  a linked step is the user's (removing the link would lose their way to the data,
  following it would delete the data itself);
* an entry that cannot be removed is a warning line naming it, never a failed save: the
  step that was just committed is saved, and the next save tries again.

A step is removed crash-safely: first renamed out of the step names, in one `rename(2)`, to
`.global_step_N.removing-<pid>` beside it, then deleted. A kill partway through the delete
(rmtree goes entry by entry, in the order the file system lists them) left a `global_step_N` without
manifest that no prune counted and no command named, on a real model gigabytes of it; now
it leaves a hidden leftover, which the next save's prune deletes. Such a manifest-less
`global_step_N` that a kill left before this, older than every step `keep_last` keeps, is
deleted too: no save writes under a step's own name (a save writes `global_step_N.tmp`, and
renames it once its manifest is written), and the run holds the run dir's lock, so no other
run is writing it. Both may hold what the user meant to keep, so `mfsdp ckpt validate` and
`inspect` warn of them beforehand (`doomed_entries`) and the prune names each it deletes.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from mfsdp_ckpt.format import layout
from mfsdp_ckpt.format.left_step_names import REMOVING_STEP_RE, REMOVING_TAG
from mfsdp_ckpt.kill_points import maybe_die

PRUNING_RANK = 0  # the rank that commits a save prunes after it (checkpointer.py)
_LEFTOVER = "an old step whose removal (checkpoint.keep_last) was stopped, not a checkpoint"
_NO_MANIFEST = f"a step dir without {layout.MANIFEST_FILE}, so no complete step"
_DELETED_BY = "the next save of this run with checkpoint.keep_last deletes it"


def prune_steps(run_dir: Path, newest: int, keep_last: int | None) -> list[str]:
    """After step `newest` was committed in `run_dir`: remove the temp dirs of saves of
    earlier steps that did not finish, what an earlier prune left half removed and, with
    `keep_last`, the complete steps older than the newest `keep_last` ones at or below
    `newest`. Steps above `newest` (a run resumed from an earlier step saves below newer
    ones: a tracker set back, saves interrupted) are neither counted nor removed: they are
    another history's, which the resume named as left beside until a save of their step
    replaces them, and counting them deleted this run's own steps. Returns one
    warning line for each entry that could not be removed (or for the run dir, when it
    cannot be listed), and one naming each dir removed that was no complete step of the
    run (a stopped removal's leftover, a step dir without manifest): those may hold what
    the user meant to keep, so the user is told what went."""
    try:
        scan = _scan(run_dir)
    except OSError as err:
        return [_not_pruned(run_dir, err, newest)]
    removed: list[Path] = []  # steps: renamed out of the step names first
    partial: list[Path] = []
    if keep_last is not None:
        complete = sorted((step, path) for step, path in scan.complete if step <= newest)
        cut = max(0, len(complete) - keep_last)
        removed += [path for step, path in complete[:cut] if step != newest]
        oldest_kept = min([newest, *(step for step, _ in complete[cut:])])
        partial = [path for step, path in scan.partial if step < oldest_kept]
    warnings = [
        line for step, path in scan.saving if step < newest and (line := _removed(path, newest))
    ]
    for path in scan.leftovers:
        line = _removed(path, newest)
        warnings.append(
            _removed_line(path, "an old step whose removal was stopped") if line is None else line
        )
    for path in removed + partial:
        try:
            aside = _moved_out(path)
        except FileNotFoundError:  # removed meanwhile (by the user)
            continue
        except OSError as err:
            warnings.append(_not_pruned(path, err, newest))
            continue
        maybe_die("mid_prune", newest, PRUNING_RANK)
        line = _removed(aside, newest)
        if line is None and path in partial:
            line = _removed_line(path, _NO_MANIFEST)
        if line is not None:
            warnings.append(line)
    return warnings


def doomed_entries(run_dir: Path) -> list[tuple[Path, str]]:
    """What later saves of the run in `run_dir` delete that is no complete step of it, each
    as (where, what it is and when it goes): the leftovers of stopped removals
    (said once, of the first) and each step dir without manifest older than the
    newest complete step, which a save with `keep_last` deletes once it is older than every
    step kept. `mfsdp ckpt validate` and `inspect` warn of them before a save deletes them;
    none when the run dir cannot be listed."""
    try:
        scan = _scan(run_dir)
    except OSError:
        return []
    leftovers = sorted(scan.leftovers)
    found = [(leftovers[0], _leftover_note(leftovers))] if leftovers else []
    steps = sorted(step for step, _ in scan.complete)
    for step, path in sorted(scan.partial):
        if steps and step < steps[-1]:
            when = "" if step < steps[0] else " once every step it keeps is newer"
            found.append((path, f"{_NO_MANIFEST}: {_DELETED_BY}{when}; move it away to keep it"))
    return found


@dataclass
class _Scan:
    """What a prune sees in a run dir, symlinks never followed nor counted (a linked step
    is the user's): the temp dirs of unfinished saves, (step, dir); the leftovers of
    stopped removals; the complete steps, (step, dir) with a manifest; and the partial
    ones, `global_step_N` without."""

    saving: list[tuple[int, Path]] = field(default_factory=list)
    leftovers: list[Path] = field(default_factory=list)
    complete: list[tuple[int, Path]] = field(default_factory=list)
    partial: list[tuple[int, Path]] = field(default_factory=list)


def _scan(run_dir: Path) -> _Scan:
    """`_Scan` of `run_dir`; OSError when it cannot be listed."""
    with os.scandir(run_dir) as listing:
        entries = [entry for entry in listing if not entry.is_symlink()]
    scan = _Scan()
    for entry in entries:
        if not entry.is_dir(follow_symlinks=False):
            continue
        path = Path(entry.path)
        if entry.name.endswith(layout.TMP_STEP_SUFFIX):
            step = layout.parse_step_dir_name(entry.name[: -len(layout.TMP_STEP_SUFFIX)])
            if step is not None:
                scan.saving.append((step, path))
        elif REMOVING_STEP_RE.match(entry.name):
            scan.leftovers.append(path)
        elif (step := layout.parse_step_dir_name(entry.name)) is not None:
            (scan.complete if _has_manifest(path) else scan.partial).append((step, path))
    return scan


def _leftover_note(leftovers: list[Path]) -> str:
    """What `doomed_entries` says of the leftovers of stopped removals, said of the first
    of them (the warning names it)."""
    more = f" ({len(leftovers) - 1} more like it beside it)" if len(leftovers) > 1 else ""
    return f"{_LEFTOVER}{more}: the next save of this run removes it, or remove it by hand"


def _removed_line(path: Path, what: str) -> str:
    """The line naming a dir a prune deleted that was no complete step of the run."""
    return f"warning: {path}: removed by checkpoint.keep_last ({what})"


def _removed(path: Path, newest: int) -> str | None:
    """Delete the tree at `path`; a warning line when it cannot be deleted."""
    try:
        shutil.rmtree(path)
    except FileNotFoundError:  # removed meanwhile (by the user, or another prune)
        return None
    except OSError as err:
        return _not_pruned(path, err, newest)
    return None


def _moved_out(step_dir: Path) -> Path:
    """Rename `step_dir` to its hidden removal name beside it, in one step: from then on no
    command reads it as a step, however its deletion ends."""
    aside = step_dir.with_name(f".{step_dir.name}{REMOVING_TAG}{os.getpid()}")
    os.rename(step_dir, aside)
    return aside


def _has_manifest(step_dir: Path) -> bool:
    """A step dir without a manifest is no complete step (a crashed save, or something the
    user made): it never counts toward `keep_last`."""
    return (step_dir / layout.MANIFEST_FILE).is_file()


def _not_pruned(path: Path, err: OSError, newest: int) -> str:
    return (
        f"warning: {path}: not removed by checkpoint.keep_last ({err.strerror or err});"
        f" step {newest} is saved, and the next save tries again"
    )
