"""A directory of one-problem `.json` files read as one split: the official MATH release
(MATH/{train,test}/<subject>/<n>.json, 12,500 files of one object each).

Its files could not be converted: a directory was refused, and several files make one
split only as the Hub's shards of it, so the release was neither one split nor thousands of
useful tables. A directory is walked in sorted order (each problem's index stays the same
from run to run), looking at no more than MAX_PROBLEM_FILES entries, following no link out
of it; its name gives the split (`train` of MATH/train) unless --split does. A directory
holding split directories (MATH itself) or whole tables (.jsonl, .parquet: a download of
the Hub's files: refused as any directory is, naming its tables) is refused, naming what
to give instead.
"""

from __future__ import annotations

import os
from pathlib import Path

from trainer.data.files import DataFileError, check_data_file

# entries looked at in one directory tree: far more than the release's 12,500 problems
MAX_PROBLEM_FILES = 200_000
PROBLEM_SUFFIX = ".json"
TABLE_SUFFIXES = (".jsonl", ".parquet")


def problem_files(directory: str | os.PathLike, split_words: frozenset[str]) -> list[Path]:
    """The `.json` files under `directory` in sorted order (hidden names passed over), or
    DataFileError naming what to give instead: a subdirectory named as a split
    (`split_words`: train, test, ...), a table file, a link leading out of `directory`, more
    than MAX_PROBLEM_FILES entries, or no `.json` file at all."""
    root = Path(directory)
    splits = sorted(
        entry.name for entry in os.scandir(root) if entry.is_dir() and entry.name in split_words
    )
    if splits:
        given = " ".join(f"--input {root / name}" for name in splits)
        raise DataFileError(f"{root}: holds splits {', '.join(splits)}; give each: {given}")
    inside = os.path.realpath(root)
    found: list[Path] = []
    seen = 0
    for folder, dirs, files in os.walk(root, onerror=_raise):  # links to folders: not walked
        dirs[:] = sorted(name for name in dirs if not name.startswith("."))
        for name in sorted([*files, *dirs]):
            seen += 1
            if seen > MAX_PROBLEM_FILES:
                raise DataFileError(
                    f"{root}: more than {MAX_PROBLEM_FILES} entries; give a smaller directory"
                    " or a table file"
                )
            path = Path(folder) / name
            if name.startswith("."):
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
    return sorted(found)


def _refuse_link_out(path: Path, inside: str) -> None:
    """Refuse a link at `path` that leads out of the directory (real path `inside`)."""
    if not path.is_symlink():
        return
    target = os.path.realpath(path)
    if os.path.commonpath([inside, target]) != inside:
        raise DataFileError(f"{path}: a link out of the directory given (to {target})")


def _raise(err: OSError) -> None:
    raise DataFileError(f"{err.filename}: cannot be read ({err.strerror})")
