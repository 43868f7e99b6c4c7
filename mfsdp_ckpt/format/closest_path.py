"""What a path not found was most likely meant to be: the existing path a mistyped one
names (`runs/demo/sf` -> `runs/demo/sft`, `.../global_step_81` -> `.../global_step_80`), and,
for a relative one, the directory it was read from. A "no such file or directory" alone left
the user to list the directories themselves, and a relative path given from another
directory than meant (a script's, after a `cd`) read as a file missing.

Hidden names (a leading `.`) are never offered: beside an output lie its lock and work files
(`.conc.out-lock`, `.hf.export-tmp-<pid>`), which a command neither reads nor lets anyone
name, and `runs/conc`, missing while its run starts, was answered with its lock file."""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

MAX_NAMES_COMPARED = 10_000  # a huge directory is not listed in full for a hint
# How alike (difflib's ratio) a name must be to the missing one to be offered. difflib's
# default 0.6 offered `scripts` for `ckpts` (0.67): two letters apart in five is another
# name, not a typo. 0.75 keeps a letter dropped, added or swapped (`sf`/`sft` 0.8,
# `dmo`/`demo` 0.86, `dmeo`/`demo` 0.75) and a digit changed (`global_step_81`).
MIN_RATIO = 0.75
# A name cut short or given in part (`dist` or `ckpt` for `dist_ckpt`) is far from the whole
# by that ratio, yet plainly meant: a part of at least this many characters that lies in one
# name only is offered. Shorter parts (`scr`) lie in too many names to mean one.
MIN_PART_CHARS = 4
_NUMBERED = re.compile(r"^(.*?)0*([0-9]+)$")  # `iter_3` and `iter_0000003`: the same step


def where_relative(path: str | os.PathLike) -> str:
    """`; relative paths are read from CWD` for a relative path, else nothing: every "not
    found" of a path the user gave ends so (`missing_hint`)."""
    if os.path.isabs(path):
        return ""
    try:
        return f"; relative paths are read from {os.getcwd()}"
    except OSError:  # the current directory was removed: no directory to name
        return ""


def missing_hint(path: str | os.PathLike) -> str:
    """The end of a "not found" line for the path `path` the user gave: where a relative path
    was read from, then the path it most likely meant (`; did you mean runs/demo/sft?`)."""
    closest = closest_existing(path)
    return where_relative(path) + (f"; did you mean {closest}?" if closest is not None else "")


def closest_existing(path: str | os.PathLike) -> Path | None:
    """The path with its first missing part replaced by the closest name in the directory
    above it (and the rest kept when that then exists), or None when no name is close."""
    given = Path(path)
    parts = given.parts
    for depth in range(len(parts), 0, -1):
        parent = Path(*parts[: depth - 1]) if depth > 1 else Path(".")
        if os.path.isdir(parent):
            break
    else:
        return None
    missing, rest = parts[depth - 1], parts[depth:]
    try:
        with os.scandir(parent) as entries:
            names = [entry.name for _, entry in zip(range(MAX_NAMES_COMPARED), entries)]
    except OSError:
        return None
    # `missing` there: a dangling link
    others = [name for name in names if name != missing and _offered(name, missing)]
    meant = _same_number(missing, others) or _containing(missing, others)
    if meant is None:
        close = difflib.get_close_matches(missing, others, n=1, cutoff=MIN_RATIO)
        if not close:
            return None
        meant = close[0]
    found = parent / meant if depth > 1 else Path(meant)
    return found / Path(*rest) if rest and (found / Path(*rest)).exists() else found


def _offered(name: str, missing: str) -> bool:
    """Whether `name` may be suggested for `missing`: a hidden name only for a hidden name
    mistyped (`.chekpoints` for `.checkpoints`), and never the work files mfsdp leaves beside
    an output (`.<name>.out-lock`, `.<name>.export-tmp-<pid>`, `.<name>.<pid>-<hex>.tmp`),
    which are hidden names holding a second dot."""
    if not name.startswith("."):
        return True
    return missing.startswith(".") and "." not in name[1:]


def _same_number(missing: str, names: list[str]) -> str | None:
    """The name that is `missing` with its number padded otherwise (Megatron-LM's
    `iter_0000003` for `iter_3`), when exactly one is."""
    given = _NUMBERED.match(missing)
    if given is None:
        return None
    found = [
        name
        for name in names
        if (other := _NUMBERED.match(name)) is not None and other.groups() == given.groups()
    ]
    return found[0] if len(found) == 1 else None


def _containing(missing: str, names: list[str]) -> str | None:
    """The one name holding `missing` whole (`dist_ckpt` for `dist` or `ckpt`), when it is
    MIN_PART_CHARS long or more and no other name holds it."""
    if len(missing) < MIN_PART_CHARS:
        return None
    found = [name for name in names if missing in name]
    return found[0] if len(found) == 1 else None
