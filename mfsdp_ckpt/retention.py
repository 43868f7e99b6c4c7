"""Which old steps a run removes after a save (`checkpoint.keep_last`), and how.

A run dir holds the user's days of compute, and not only what the run wrote there: a
step dir moved to another disk and linked back, a copy made by hand. So pruning removes
only what this run's saves make, exactly as listed:

* only a real directory named `global_step_N` (`layout.parse_step_dir_name`: no
  `global_step_06`) that holds a manifest counts as a step and may be removed;
* a symlink is never followed and never removed, and does not count toward `keep_last`:
  a linked step is the user's (removing the link would lose their way to the data,
  following it would delete the data itself);
* an entry that cannot be removed is a warning line naming it, never a failed save: the
  step that was just committed is saved, and the next save tries again.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from mfsdp_ckpt.format import layout


def prune_steps(run_dir: Path, newest: int, keep_last: int | None) -> list[str]:
    """After step `newest` was committed in `run_dir`: remove the temp dirs of saves of
    earlier steps that did not finish and, with `keep_last`, the complete steps older than
    the newest `keep_last` ones (never `newest` itself, which a run resumed from an
    earlier step saves below newer ones). Returns one warning line for each
    entry that could not be removed (or for the run dir, when it cannot be listed)."""
    try:
        with os.scandir(run_dir) as listing:
            entries = [entry for entry in listing if not entry.is_symlink()]
    except OSError as err:
        return [_not_pruned(run_dir, err, newest)]
    stale: list[Path] = []  # what goes: unfinished saves, then steps past keep_last
    complete: list[tuple[int, Path]] = []
    for entry in entries:
        if not entry.is_dir(follow_symlinks=False):
            continue
        if entry.name.endswith(layout.TMP_STEP_SUFFIX):
            step = layout.parse_step_dir_name(entry.name[: -len(layout.TMP_STEP_SUFFIX)])
            if step is not None and step < newest:
                stale.append(Path(entry.path))
            continue
        step = layout.parse_step_dir_name(entry.name)
        if step is not None and _has_manifest(Path(entry.path)):
            complete.append((step, Path(entry.path)))
    if keep_last is not None:
        complete.sort()
        old = complete[: max(0, len(complete) - keep_last)]
        stale += [path for step, path in old if step != newest]
    warnings = []
    for path in stale:
        try:
            shutil.rmtree(path)
        except FileNotFoundError:  # removed meanwhile (by the user, or another prune)
            continue
        except OSError as err:
            warnings.append(_not_pruned(path, err, newest))
    return warnings


def _has_manifest(step_dir: Path) -> bool:
    """A step dir without a manifest is no complete step (a crashed save, or something the
    user made): it never counts, and is never removed."""
    return (step_dir / layout.MANIFEST_FILE).is_file()


def _not_pruned(path: Path, err: OSError, newest: int) -> str:
    return (
        f"warning: {path}: not removed by checkpoint.keep_last ({err.strerror or err});"
        f" step {newest} is saved, and the next save tries again"
    )
