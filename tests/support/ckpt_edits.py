"""Edits a test makes to a saved checkpoint on purpose. Each plants one fault and keeps the
manifest in agreement with every other change it makes, so that only the planted fault shows.
Every function takes a step dir (`global_step_N/`), whichever step the test's run saved."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
from collections.abc import Callable
from pathlib import Path

from mfsdp_ckpt.format import layout
from mfsdp_ckpt.format.dcp_metadata import load_metadata
from mfsdp_ckpt.format.manifest_digest import DIGEST_FIELD, sealed

METADATA = f"{layout.DIST_CKPT_DIR}/{layout.DCP_METADATA_FILE}"  # as the manifest names it


class RunsCode:
    """Pickles to a call of os.system: what a malicious checkpoint would contain. Loading it
    with a full unpickler creates `marker`; a safe reader must refuse it instead."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def biggest_shard(step: Path) -> Path:
    """The largest .distcp file (ties broken by name, so the choice is the same every run)."""
    shards = (step / layout.DIST_CKPT_DIR).glob("*.distcp")
    return max(shards, key=lambda p: (p.stat().st_size, p.name))


def edit_manifest(step: Path, edit: Callable[[dict], None]) -> None:
    """Let `edit` change manifest.json's parsed JSON in place, then write it back with its
    digest of itself made anew (where it had one), so the edit is all that differs."""
    path = step / layout.MANIFEST_FILE
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(resealed(data), indent=2))


def resealed(data: dict) -> dict:
    """A manifest's parsed JSON with its digest of itself made anew; as it was without one."""
    return sealed(data) if DIGEST_FIELD in data else data


def rehash(step: Path, *names: str) -> None:
    """Record the current size and sha256 of the files `names` (relative to the step) in the
    manifest; with no names, of every regular file it lists."""

    def edit(data: dict) -> None:
        for name in names or list(data["files"]):
            file = step / name
            if file.is_file() and not file.is_symlink():
                data["files"][name] = {
                    "size": file.stat().st_size,
                    "sha256": hashlib.sha256(file.read_bytes()).hexdigest(),
                }

    edit_manifest(step, edit)


def write_metadata(step: Path, data: bytes) -> None:
    """Replace .metadata with `data` (any bytes) and rehash it."""
    (step / METADATA).write_bytes(data)
    rehash(step, METADATA)


def edit_metadata(step: Path, edit: Callable) -> None:
    """Load .metadata (safely, as DCP's classes), let `edit` change it, pickle it back."""
    metadata = load_metadata(step / METADATA)
    edit(metadata)
    write_metadata(step, pickle.dumps(metadata))


def point_at_appended_blob(step: Path, metadata, index, blob: bytes) -> None:
    """Inside an `edit_metadata` edit: append `blob` to the shard of storage entry `index`,
    point the entry at it and rehash that shard (the other chunks keep their bytes)."""
    info = metadata.storage_data[index]
    shard = step / layout.DIST_CKPT_DIR / info.relative_path
    offset = shard.stat().st_size
    with open(shard, "ab") as handle:
        handle.write(blob)
    metadata.storage_data[index] = dataclasses.replace(info, offset=offset, length=len(blob))
    rehash(step, f"{layout.DIST_CKPT_DIR}/{info.relative_path}")
