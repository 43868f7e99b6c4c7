"""An output path with its `..` taken away as text, before anything checks or writes it.

The kernel reads `P/new/..` through `P/new`: while `new` does not exist the path names
nothing, so each check of what is there (is it empty, a previous demo, a run, a checkpoint,
data tables) found nothing to refuse; then `mkdir -p` made `new`, and the command wrote into
`P` itself. `mfsdp demo --out P/new/..` took a user's non-empty directory for a new one,
listed the user's files as its own, and the next `mfsdp demo --out P` deleted them;
`trainer.run_dir=RUN/new/..` trained into a run's dir past the check that refuses one, and
`mfsdp data --out D/new/..` left `D/new` behind. With `..` taken away first, the checks and
the writes name the one directory, `P`, whatever exists below it. A path without `..` is
kept as typed (`./x/` stays so in every line naming it), and so is a URL (`gs://b/x/..`
is refused as one, never turned into the local `gs:/b`).
"""

from __future__ import annotations

import os

from mfsdp_ckpt.format.path_urls import is_url_not_path


def collapse_dot_dot(path: str) -> str:
    """`path` with each `..` taken away as text (`os.path.normpath`), relative where it was:
    `P/new/..` -> `P`, `a/b/../c` -> `a/c`; a path with no `..` in it, an empty one (refused
    as empty where it is checked) and a URL are returned as they are."""
    if not path or ".." not in path.split(os.sep) or is_url_not_path(path):
        return path
    return os.path.normpath(path)


__all__ = ["collapse_dot_dot"]
