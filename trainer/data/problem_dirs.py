"""A directory of one-problem `.json` files read as one split: the official MATH release
(MATH/{train,test}/<subject>/<n>.json, 12,500 files of one object each).

Its files could not be converted: a directory was refused, and several files make one
split only as the Hub's shards of it, so the release was neither one split nor thousands of
useful tables. A directory is walked in sorted order (each problem's index stays the same
from run to run), looking at no more than MAX_PROBLEM_FILES entries nor more than MAX_DEPTH
directories deep (iteratively: a recursive walk died of Python's recursion limit in a tree
~1000 deep, a traceback), following no link out of it. A file reached twice (a link inside
the tree to another problem file, or a hard link: the same device and inode) is read once,
at its first path in sorted order: it is one problem, and was converted twice. The
directory's name gives the split (`train` of MATH/train) unless --split does. A directory
holding split directories (MATH itself) or whole tables (.jsonl, .parquet: a download of
the Hub's files: refused as any directory is, naming its tables) is refused, naming what
to give instead.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

from trainer.data.files import MAX_JSONL_LINE_BYTES, DataFileError, check_data_file

# entries looked at in one directory tree: far more than the release's 12,500 problems
MAX_PROBLEM_FILES = 200_000
# directories nested below the one given: the release nests 1 (train/<subject>/<n>.json)
MAX_DEPTH = 32
PROBLEM_SUFFIX = ".json"
_NUMBERED = re.compile(r"[0-9]+\.json", re.IGNORECASE)  # a problem file's name: its number
TABLE_SUFFIXES = (".jsonl", ".parquet")
_HEAD_BYTES = 64 << 10  # read first: an array's `[` (a table) needs no more
_BOM = b"\xef\xbb\xbf"


def problem_files(directory: str | os.PathLike, split_words: frozenset[str]) -> list[Path]:
    """The `.json` files under `directory` in sorted order (hidden names passed over), or
    DataFileError naming what to give instead: a subdirectory named as a split
    (`split_words`: train, test, ...), a table file, a link leading out of `directory`, more
    than MAX_PROBLEM_FILES entries, directories nested over MAX_DEPTH deep, or no `.json`
    file at all. A file reached under two paths is listed once (`_once_each`)."""
    root = Path(directory)
    splits = sorted(
        entry.name for entry in os.scandir(root) if entry.is_dir() and entry.name in split_words
    )
    if splits:
        given = " ".join(f"--input {root / name}" for name in splits)
        raise DataFileError(f"{root}: holds splits {', '.join(splits)}; give each: {given}")
    inside = os.path.realpath(root)
    found: list[Path] = []
    for seen, path in enumerate(_entries(root), start=1):
        if seen > MAX_PROBLEM_FILES:
            raise DataFileError(
                f"{root}: more than {MAX_PROBLEM_FILES} entries; give a smaller directory"
                " or a table file"
            )
        if path.name.startswith("."):
            continue
        _refuse_link_out(path, inside)
        suffix = path.suffix.lower()
        if suffix in TABLE_SUFFIXES:  # a download of tables: the files to give, named
            check_data_file(root)  # as for any directory given (raises)
        if suffix == PROBLEM_SUFFIX and not path.is_dir():
            found.append(path)
    if not found:
        raise DataFileError(
            f"{root}: a directory with no .json problem files; give a data file (.parquet,"
            " .jsonl or .json) or a directory of one .json file per problem"
        )
    return _once_each(sorted(found))


def _entries(root: Path) -> Iterator[Path]:
    """Every entry under `root`, each directory's in sorted order, walked with a stack (no
    recursion) into directories that are not links and not hidden, no more than MAX_DEPTH
    deep (DataFileError naming `root`)."""
    stack = [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            with os.scandir(folder) as listing:
                entries = sorted(listing, key=lambda entry: entry.name)
        except OSError as err:
            _raise(err)
        below = [
            Path(entry.path)
            for entry in entries
            if not entry.name.startswith(".") and entry.is_dir(follow_symlinks=False)
        ]
        if below and depth >= MAX_DEPTH:
            raise DataFileError(
                f"{root}: directories nested more than {MAX_DEPTH} deep; give a directory"
                " of one .json file per problem (MATH/train/<subject>/<n>.json)"
            )
        yield from (Path(entry.path) for entry in entries)
        stack.extend((path, depth + 1) for path in reversed(below))


def _once_each(paths: list[Path]) -> list[Path]:
    """`paths` less any file already listed under another path (same device and inode): a
    link inside the tree to a problem file converted that problem twice. A path that
    cannot be stat'ed (a link loop, a dangling link) stays, for the reader to refuse."""
    kept: list[Path] = []
    files: set[tuple[int, int]] = set()
    for path in paths:
        try:
            status = path.stat()
        except OSError:
            kept.append(path)
            continue
        if (status.st_dev, status.st_ino) not in files:
            files.add((status.st_dev, status.st_ino))
            kept.append(path)
    return kept


def _refuse_link_out(path: Path, inside: str) -> None:
    """Refuse a link at `path` that leads out of the directory (real path `inside`)."""
    if not path.is_symlink():
        return
    target = os.path.realpath(path)
    if os.path.commonpath([inside, target]) != inside:
        raise DataFileError(f"{path}: a link out of the directory given (to {target})")


def _raise(err: OSError) -> NoReturn:
    raise DataFileError(f"{err.filename}: cannot be read ({err.strerror})")


def directory_route(paths: list[str], split: str | None) -> str | None:
    """What to give instead of the loose `.json` files `paths` made one split: the
    directory holding them all, as one --input (`problem_files` reads a directory as one
    split, as the official release is laid out: MATH/train/<subject>/<n>.json), or None
    where one is no `.json` file (tables, the Hub's shards, make a split otherwise)."""
    if not all(Path(path).suffix.lower() == PROBLEM_SUFFIX for path in paths):
        return None
    folders = [os.path.dirname(path) or os.curdir for path in paths]
    try:
        folder = os.path.commonpath(folders)
    except ValueError:  # absolute and relative paths mixed
        folder = os.path.commonpath([os.path.abspath(path) for path in folders])
    named = f" --split {split}" if split else ""
    if os.path.realpath(folder) == os.path.realpath(os.curdir):  # --input . is refused
        return (
            "a directory of one .json file per problem is one split: move them into one"
            f" and give it, --input DIR{named}"
        )
    return (
        "a directory of one .json file per problem is one split: give the one holding"
        f" them, --input {folder}{named}"
    )


def refuse_numbered_problems(inputs: list[str]) -> None:
    """Refuse, as DataFileError, `.json` inputs named as the release's problem files are
    (`<n>.json`, the problem's number) where no --split is given: each file's name made a
    split of its own, one table per problem (sft/1, sft/2, ..., exit 0). They are pointed
    to the directory holding them (`directory_route`), as several given with --split are;
    one alone may take --split. A file is judged by what it holds (`_holds_one_problem`):
    a JSON table named by a number (`500.json` holding an array of problems, or JSON lines)
    is a split like any other, and was refused as one problem for its name alone."""
    numbered = [
        path
        for path in inputs
        if _NUMBERED.fullmatch(Path(path).name) and _holds_one_problem(Path(path))
    ]
    if not numbered:
        return
    route = directory_route(numbered, None)
    if len(numbered) == 1:
        raise DataFileError(
            f"--input {numbered[0]}: a file of one problem (named by its number, as MATH's"
            f" <n>.json) makes no split of its own; {route}, or --split NAME to convert it alone"
        )
    raise DataFileError(
        f"--input {numbered[0]} and --input {numbered[1]}: files of one problem each (named by"
        f" their numbers, as MATH's <n>.json) make no split of their own; {route}"
    )


def _holds_one_problem(path: Path) -> bool:
    """Whether `path` holds one problem as the release's files do: one JSON object with a
    `problem` key, alone in the file. Bounded: a first non-space byte other than `{` (an
    array) decides from the file's head, and no more than the reader's cap on one row
    (MAX_JSONL_LINE_BYTES) is read. What cannot be judged (unreadable, a first object
    running past the cap) is taken by its name, a problem's number."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(_HEAD_BYTES)
            if not head.removeprefix(_BOM).lstrip().startswith(b"{"):
                return False
            text = head + handle.read(MAX_JSONL_LINE_BYTES + 1 - len(head))
    except OSError:
        return True
    held = text.removeprefix(_BOM).decode("utf-8", errors="replace").lstrip()
    try:
        value, end = json.JSONDecoder().raw_decode(held)
    except ValueError:  # past the cap: a number's name; else broken, for the reader to name
        return len(text) > MAX_JSONL_LINE_BYTES
    if held[end:].strip():  # JSON lines: a table of rows
        return False
    return isinstance(value, dict) and "problem" in value
