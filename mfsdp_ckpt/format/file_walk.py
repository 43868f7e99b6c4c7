"""Listing the files under a checkpoint or model dir, bounded.

Validate compares a step's files with its manifest and export picks a model dir's files
from this list; the walk follows no symlinked dir and is bounded in depth and count, so
a symlink loop or a 1,500-deep chain of dirs is one line, never a hang.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.format.dir_entries import unreadable
from mfsdp_ckpt.format.layout import CheckpointPathError
from mfsdp_ckpt.storage import safe_files

MAX_WALK_DEPTH = 32
MAX_WALK_ENTRIES = 100_000


def list_files(
    root: str | os.PathLike, skip_hidden: bool = False, skip: Collection[str] = ()
) -> list[str]:
    """Relative paths of the regular files and symlinks under `root`, sorted, without
    following symlinked directories; bounded in depth and count so that a 1,500-deep
    chain or a symlink loop is one line (CheckpointPathError), not a crash or a hang.
    `skip_hidden` leaves out every name starting with "." and what is under it (a model
    dir cloned with git holds `.git/lfs/objects/`: the weights again, gigabytes each);
    `skip`, the entries of `root` so named (an HF Trainer checkpoint's own files and
    DCP dirs beside its config and tokenizer: `CheckpointPaths.hf_skip`)."""
    base = Path(root)
    found: list[str] = []
    pending: list[tuple[Path, int]] = [(base, 0)]
    seen = 0
    while pending:
        directory, depth = pending.pop()
        if depth > MAX_WALK_DEPTH:
            raise CheckpointPathError(f"{base}: directories nested more than {MAX_WALK_DEPTH} deep")
        try:
            entries = list(os.scandir(directory))
        except PermissionError as err:
            raise unreadable(directory, "cannot list", err) from None
        except NotADirectoryError:  # `root` itself: a FIFO or a device given for a dir
            raise CheckpointPathError(not_a_directory(directory)) from None
        except OSError as err:
            raise CheckpointPathError(
                f"{cut_to(str(directory), 200)}: cannot list ({err.strerror or err})"
            ) from None
        seen += len(entries)
        if seen > MAX_WALK_ENTRIES:
            raise CheckpointPathError(f"{base}: more than {MAX_WALK_ENTRIES} entries")
        for entry in entries:
            if skip_hidden and entry.name.startswith("."):
                continue
            if depth == 0 and entry.name in skip:
                continue
            if entry.is_dir(follow_symlinks=False):
                pending.append((Path(entry.path), depth + 1))
            else:
                found.append(os.path.relpath(entry.path, base))
    return sorted(found)


def not_a_directory(path: Path) -> str:
    """The line for a `path` listed as a directory that is none, saying what it is ("a FIFO,
    not a directory"): "cannot list (Not a directory)" read as a directory that could not
    be opened."""
    try:
        kind = safe_files.kind_name(os.stat(path).st_mode)
    except OSError as err:  # gone or changed since: say what the listing met
        return f"{cut_to(str(path), 200)}: cannot list ({err.strerror or err})"
    return f"{cut_to(str(path), 200)}: {kind}, not a directory"
