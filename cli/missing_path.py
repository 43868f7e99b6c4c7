"""The one line every command says of a path it was given that is not there.

A missing file was worded six ways: "no such file or directory", "no such file", "no such
directory (give a Hugging Face model dir)", "cannot read config (No such file or directory)",
"file is missing", and some without the directory a relative path was read from. Each
command now checks the paths it reads before anything else does, and says it as `ckpt
validate` does: `PATH: no such file or directory; relative paths are read from CWD` (then the
close name meant, `; did you mean runs/demo/sft?`), exit 2.
"""

from __future__ import annotations

import os

from cli.errors import EXIT_USAGE, fail
from mfsdp_ckpt.format.closest_path import missing_hint
from mfsdp_ckpt.format.path_urls import is_url_not_path


def missing_line(given: str | os.PathLike) -> str:
    """`GIVEN: no such file or directory` and where a relative one was read from (with the
    close name it likely meant)."""
    return f"{os.fspath(given)}: no such file or directory{missing_hint(given)}"


def refuse_missing(given: str | os.PathLike, key: str = "", hint: str = "") -> None:
    """Exit 2 with `missing_line` (after `key: `, the config key that named it, and before
    `hint`) when nothing is at `given`; a URL, and a link to nothing (it is there: the reader
    says where it leads), are left to the command."""
    if os.path.lexists(given) or is_url_not_path(os.fspath(given)):
        return
    fail(f"{f'{key}: ' if key else ''}{missing_line(given)}{hint}", EXIT_USAGE)


__all__ = ["missing_line", "refuse_missing"]
