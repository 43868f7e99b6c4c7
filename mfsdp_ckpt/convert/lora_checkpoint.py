"""Whether a checkpoint is an mfsdp LoRA checkpoint: its manifest records an adapter.

Asked before any weight is read, both by the routing of an export (`lora_export_kind`) and
by the LoRA export itself (`lora_export`); a URL naming one is refused here, since a LoRA
export reads local files only.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from mfsdp_ckpt.convert.export_errors import ExportUsageError
from mfsdp_ckpt.convert.export_source import resolve_url
from mfsdp_ckpt.format import checkpoint_resolution, layout, path_urls
from mfsdp_ckpt.format.manifest import MAX_MANIFEST_BYTES, Manifest, ManifestError, read_manifest
from mfsdp_ckpt.storage.tensorstore_store import is_url, join_location, open_store

if TYPE_CHECKING:
    pass


def lora_manifest(ckpt: str | os.PathLike, io: str = "auto") -> Manifest | None:
    """The manifest of a local LoRA checkpoint, else None (not LoRA, a URL, or no readable
    manifest: the ordinary export path then reports whatever is wrong). A URL naming an
    mfsdp LoRA checkpoint is refused (`_refuse_lora_url`): its export reads local files."""
    if is_url(str(ckpt)):
        _refuse_lora_url(str(ckpt), io)
        return None
    try:
        paths = checkpoint_resolution.resolve_checkpoint(ckpt)
        manifest = read_manifest(paths.manifest) if paths.manifest else None
    except (layout.CheckpointPathError, layout.DamagedRunDirError, ManifestError, OSError):
        return None
    return manifest if manifest is not None and manifest.lora is not None else None


def _refuse_lora_url(url: str, io: str) -> None:
    """ExportUsageError for a URL naming an mfsdp LoRA checkpoint: its export reads local
    files only, and read through the URL as any checkpoint it was told to be a live PEFT
    model's save, with advice for that. A `file:` URL names the local path that exports;
    a store's (gs://, s3://, ...) is to be copied to a local dir first."""
    local = path_urls.file_url_path(url)
    if local is not None:
        if lora_manifest(local) is not None:
            raise ExportUsageError(
                f"{url}: an mfsdp LoRA checkpoint, exported from its local files; give the"
                f" local path itself, {local}"
            )
        return
    if _url_manifest_records_lora(url, io):
        raise ExportUsageError(
            f"{url}: an mfsdp LoRA checkpoint, exported from local files only; copy the step"
            " dir to a local dir first and give that path"
        )


def _url_manifest_records_lora(url: str, io: str) -> bool:
    """Whether the manifest of the step at `url` records a LoRA adapter: our steps keep
    manifest.json beside dist_ckpt/. Its few bytes are read before any weight; a store that
    cannot be read at `url` fails here as the export itself would. A checkpoint at the
    store's root has no step above it, and a manifest that cannot be read (a store answers
    403 for a missing object to a reader without list rights) is no mfsdp manifest: either
    way the export goes on and says what it finds."""
    dist_ckpt, _ = resolve_url(url, open_store(url, io))
    scheme, _, path = dist_ckpt.rstrip("/").partition("://")
    if "/" not in path:  # the bucket's or the server's root: no step dir holds it
        return False
    step = f"{scheme}://{path.rsplit('/', 1)[0]}"
    try:
        store = open_store(step, io)
        size = store.size(layout.MANIFEST_FILE)
        if size is None or size > MAX_MANIFEST_BYTES:  # not ours: the export says what it is
            return False
        raw = store.read_range(layout.MANIFEST_FILE, 0, size)
    except OSError:  # CheckpointFileError among them: a read the store refused
        return False
    text = raw.decode(errors="replace")
    try:
        manifest = Manifest.from_json(text, source=join_location(step, layout.MANIFEST_FILE))
    except ManifestError:
        return False
    return manifest.lora is not None
