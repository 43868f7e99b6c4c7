"""The shape of the Hugging Face hub cache, where a model dir's files may lawfully lead.

The cache keeps each file of a model once, under its content hash, in
`models--ORG--NAME/blobs/HASH`, and a download's folders hold links to those blobs: a
snapshot (`models--ORG--NAME/snapshots/REVISION/FILE -> ../../blobs/HASH`) and, with
huggingface_hub before 0.23, a `--local-dir` download (`local_dir_use_symlinks=True`, or
"auto" for files over 5 MB: `DIR/FILE -> ~/.cache/huggingface/hub/models--ORG--NAME/blobs/HASH`,
an absolute link). Only these shapes widen where a model dir's links may lead; a folder
that merely bears one of the names (`~/snapshots/run/`, `~/blobs/`) does not.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

BLOBS = "blobs"
SNAPSHOTS = "snapshots"
MODEL_FOLDER_PREFIX = "models--"
_CONTENT_HASH = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # git sha1 or LFS sha256

BLOB_RULE = (
    f"a link into the Hugging Face cache must lead to a file directly in "
    f"{MODEL_FOLDER_PREFIX}ORG--NAME/{BLOBS}/ named by its 40 or 64 hex digit hash"
)


def cache_folder(real: Path) -> Path | None:
    """The `models--ORG--NAME` folder whose snapshot `real` (a real path) is, or is a folder
    in (a repo holding its model in a subfolder); None when it is in no real cache folder
    (one with `blobs/` beside `snapshots/`)."""
    for revision in (real, *real.parents):
        cache = revision.parent.parent
        if (
            revision.parent.name == SNAPSHOTS
            and cache.name.startswith(MODEL_FOLDER_PREFIX)
            and (cache / BLOBS).is_dir()
        ):
            return cache
    return None


def is_blob_name(path: str | os.PathLike) -> bool:
    """Whether `path` is spelt as a cache blob, `.../models--ORG--NAME/blobs/HASH`: by
    name only, nothing is looked up."""
    named = Path(path)
    return (
        _CONTENT_HASH.fullmatch(named.name) is not None
        and named.parent.name == BLOBS
        and named.parent.parent.name.startswith(MODEL_FOLDER_PREFIX)
    )


def is_blob(real: str | os.PathLike) -> bool:
    """Whether the real path `real` is a regular file that is a cache blob."""
    return is_blob_name(real) and os.path.isfile(real)


def names_cache(path: str | os.PathLike) -> bool:
    """Whether `path` names something in a Hugging Face cache (a `models--` folder or a
    `blobs` one on the way): what a refused link most likely meant to be."""
    parts = Path(path).parts
    return BLOBS in parts or any(part.startswith(MODEL_FOLDER_PREFIX) for part in parts)
