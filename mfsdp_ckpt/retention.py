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
it leaves a hidden leftover, which the next save's prune deletes (`removal_leftovers`) and
`mfsdp ckpt validate` names. Such a manifest-less `global_step_N` that a kill left before
this, older than every step `keep_last` keeps, is deleted too: no save writes under a step's
own name (a save writes `global_step_N.tmp`, and renames it once its manifest is written),
and the run holds the run dir's lock, so no other run is writing it.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from mfsdp_ckpt.format import layout
from mfsdp_ckpt.kill_points import maybe_die

REMOVING_TAG = ".removing-"  # `.global_step_N.removing-<pid>`: a step being deleted
_REMOVING_RE = re.compile(
    rf"^\.{re.escape(layout.STEP_DIR_PREFIX)}[0-9]+{re.escape(REMOVING_TAG)}[0-9]+$"
)
PRUNING_RANK = 0  # the rank that commits a save prunes after it (checkpointer.py)


def prune_steps(run_dir: Path, newest: int, keep_last: int | None) -> list[str]:
    """After step `newest` was committed in `run_dir`: remove the temp dirs of saves of
    earlier steps that did not finish, what an earlier prune left half removed and, with
    `keep_last`, the complete steps older than the newest `keep_last` ones (never `newest`
    itself, which a run resumed from an earlier step saves below newer ones). Returns one
    warning line for each entry that could not be removed (or for the run dir, when it
    cannot be listed)."""
    try:
        with os.scandir(run_dir) as listing:
            entries = [entry for entry in listing if not entry.is_symlink()]
    except OSError as err:
        return [_not_pruned(run_dir, err, newest)]
    stale: list[Path] = []  # what goes first: unfinished saves and removals
    complete: list[tuple[int, Path]] = []
    partial: list[tuple[int, Path]] = []  # `global_step_N` without manifest
    for entry in entries:
        if not entry.is_dir(follow_symlinks=False):
            continue
        if entry.name.endswith(layout.TMP_STEP_SUFFIX):
            step = layout.parse_step_dir_name(entry.name[: -len(layout.TMP_STEP_SUFFIX)])
            if step is not None and step < newest:
                stale.append(Path(entry.path))
            continue
        if _REMOVING_RE.match(entry.name):
            stale.append(Path(entry.path))
            continue
        step = layout.parse_step_dir_name(entry.name)
        if step is not None:
            (complete if _has_manifest(Path(entry.path)) else partial).append(
                (step, Path(entry.path))
            )
    removed: list[Path] = []  # steps: renamed out of the step names first
    if keep_last is not None:
        complete.sort()
        cut = max(0, len(complete) - keep_last)
        removed += [path for step, path in complete[:cut] if step != newest]
        oldest_kept = min([newest, *(step for step, _ in complete[cut:])])
        removed += [path for step, path in partial if step < oldest_kept]
    warnings = [line for path in stale if (line := _removed(path, newest)) is not None]
    for path in removed:
        try:
            aside = _moved_out(path)
        except FileNotFoundError:  # removed meanwhile (by the user)
            continue
        except OSError as err:
            warnings.append(_not_pruned(path, err, newest))
            continue
        maybe_die("mid_prune", newest, PRUNING_RANK)
        line = _removed(aside, newest)
        if line is not None:
            warnings.append(line)
    return warnings


def removal_leftovers(run_dir: Path) -> list[Path]:
    """The steps in `run_dir` whose removal (`prune_steps`) was stopped after their rename
    (a kill, a power cut), by name; none when it cannot be listed. The next save removes
    them; until then they take the disk space of the steps they were."""
    try:
        with os.scandir(run_dir) as listing:
            return sorted(Path(entry.path) for entry in listing if _REMOVING_RE.match(entry.name))
    except OSError:
        return []


def leftover_note(leftovers: list[Path]) -> str:
    """What `removal_leftovers` found, said of the first of them (the warning names it)."""
    more = f" ({len(leftovers) - 1} more like it beside it)" if len(leftovers) > 1 else ""
    return (
        "an old step whose removal (checkpoint.keep_last) was stopped, not a checkpoint"
        f"{more}: the next save of this run removes it, or remove it by hand"
    )


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
