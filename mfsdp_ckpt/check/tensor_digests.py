"""Whether the files holding some tensors still hold the bytes the manifest recorded.

A verdict read from tensor values (a tied head unequal to its embedding: `tied_head`)
cannot tell by itself whether the values were saved so or changed afterwards. mfsdp's
manifest records each file's digest, so the few files those tensors lie in are hashed
again (not the whole step, as `validate --deep` does), and one that no longer matches says
the bytes were damaged after the save. Checkpoints without a manifest (verl, Megatron-LM),
or whose manifest cannot be read (reported where it is read), tell nothing here.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from mfsdp_ckpt.format import dir_entries, layout
from mfsdp_ckpt.format.file_hash import hash_file
from mfsdp_ckpt.format.manifest import ManifestError, read_manifest
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.reader import CheckpointReader


def changed_files(
    paths: layout.CheckpointPaths | None, reader: CheckpointReader, keys: Iterable[str]
) -> list[str]:
    """The files (full paths) holding a chunk of a tensor of `keys` whose size or digest
    differs from the manifest's record, in name order; empty without a manifest. Files
    that cannot be read, or lead out of the step, are left to the checks that name them."""
    if paths is None or paths.manifest is None or paths.step_dir is None:
        return []
    try:
        records = read_manifest(paths.manifest).files
    except ManifestError:
        return []
    step = paths.step_dir
    relative = {
        _relative(Path(reader.root) / chunk.file, step)
        for key in keys
        for chunk in reader.tensors[key].chunks
        if chunk.file is not None
    }
    names = sorted(name for name in relative if name is not None)
    changed = []
    for name in names:
        record = records.get(name)
        if record is None:
            continue
        file = step / name
        try:
            found = dir_entries.stat_inside(file, step)
            if found is None or not stat.S_ISREG(found.st_mode):
                continue
            if found.st_size != record.size or hash_file(file, step, record.algorithm) != record:
                changed.append(str(file))
        except CheckpointFileError:  # a link out of the step too: named by the file checks
            continue
    return changed


def _relative(file: Path, step: Path) -> str | None:
    """`file`'s name in the manifest (relative to the step dir, `/`-separated), or None
    when it lies outside the step."""
    relative = os.path.relpath(file, step)
    if relative.startswith(os.pardir):
        return None
    return Path(relative).as_posix()
