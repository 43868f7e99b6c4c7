"""Export a LoRA checkpoint: the merged full model, or a PEFT adapter directory.

A LoRA step holds the adapter only; its manifest names the base model dir and the digest
of each weight file (`mfsdp_ckpt/lora.py`). The merged export streams the base's
safetensors (the files transformers loads, as training did) one tensor at a time, adds
`scale * B @ A` (in fp32) to each adapted weight, casts to the export dtype and writes it:
peak memory is one base tensor plus its delta, and the result loads with plain
`transformers`. The base files are hashed first and must
match the manifest: merging onto another base would silently produce a different model.
`adapter_only` writes `adapter_config.json` + `adapter_model.safetensors`, which
`peft.PeftModel.from_pretrained(base, DIR)` loads; it needs no base at all.

Both are written into a hidden sibling dir renamed into place at the end, as
`export_hf` does: a failure leaves nothing at the output path. This module checks the
checkpoint and runs either export; the adapter is read in `lora_adapter`, written as PEFT's
in `peft_adapter`, and merged in `lora_merge`.
"""

from __future__ import annotations

import importlib
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.check.report import ERROR
from mfsdp_ckpt.check.validate import invalid_checkpoint, manifest_hash_errors, validate_checkpoint
from mfsdp_ckpt.convert.export_errors import ExportError, ExportUsageError
from mfsdp_ckpt.convert.export_prepare import (
    check_out_dir,
    model_dirs_of,
    refuse_config_against_record,
)
from mfsdp_ckpt.convert.export_result import ExportResult
from mfsdp_ckpt.convert.export_scheduler import Progress
from mfsdp_ckpt.convert.export_source import (
    AssetFiles,
    asset_files,
    given_assets,
    no_config_json,
    source_for,
)
from mfsdp_ckpt.convert.lora_adapter import read_adapter
from mfsdp_ckpt.convert.lora_merge import write_merged_lora
from mfsdp_ckpt.convert.peft_adapter import write_peft_adapter
from mfsdp_ckpt.convert.tensor_writes import publish_verified
from mfsdp_ckpt.format import checkpoint_resolution, layout
from mfsdp_ckpt.format.lora_fields import base_weights_dir
from mfsdp_ckpt.format.manifest import Manifest, ManifestError, read_manifest
from mfsdp_ckpt.format.model_files import HF_CONFIG_FILE, top_level_names
from mfsdp_ckpt.lora import (
    BaseModelRecord,
    ByteProgress,
    plain_lora_init,
    read_base_model,
    records_dcp,
    unrecorded_base,
)
from mfsdp_ckpt.storage.out_dir import claim_output
from mfsdp_ckpt.storage.reader import CheckpointReader

if TYPE_CHECKING:
    pass


def export_lora(
    ckpt: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    adapter_only: bool = False,
    dtype: str = "auto",
    max_shard_size: int = 5 * 10**9,
    hf_config: str | os.PathLike | None = None,
    verify: bool = False,
    overwrite: bool = False,
    progress: Progress | None = None,
    base_progress: ByteProgress | None = None,
    role: str | None = None,
    allow_nonfinite: bool = False,
) -> ExportResult:
    """Merged HF model (default) or PEFT adapter dir (`adapter_only`) from a LoRA checkpoint.
    A merged export first hashes every byte of the base model (it must be the one the adapter
    was trained on): `base_progress` gets (bytes hashed, bytes to hash) meanwhile. `role`
    is refused as for any checkpoint without verl's roles; a tensor written holding NaN/Inf
    is refused (NonFiniteError) unless `allow_nonfinite`, as for any export.

    Raises ExportUsageError (not a LoRA checkpoint, output exists), ExportError or
    CheckpointInvalidError (damaged checkpoint, base missing or changed), OSError.
    """
    started = time.monotonic()
    paths = checkpoint_resolution.resolve_checkpoint(ckpt, role=role)
    manifest = _lora_manifest_of(ckpt, paths)
    try:
        base = read_base_model(manifest, str(paths.manifest))
    except ManifestError as err:
        raise ExportError(str(err)) from None
    _refuse_if_invalid(paths, base, adapter_only)
    adapter = read_adapter(paths, manifest)
    out = Path(out_dir)
    keep = [p.resolve() for p in (paths.dist_ckpt, paths.step_dir, paths.run_dir) if p is not None]
    check_out_dir(out, keep, model_dirs_of(hf_config, base.path if base else None))
    if not adapter_only:
        _refuse_unrecorded_base(base, paths)
        _refuse_random_init_base(base, ckpt)
        _refuse_rewritten_base(manifest, paths)
        assets, asset_location = _merged_assets(paths, adapter.reader, hf_config)
        base, moved = _base_where_it_is(base, hf_config)
    copied = top_level_names(assets) if not adapter_only else ()
    # torch loaded before the writers start their clock, as the full export loads it while
    # planning: `convert_seconds` is the tensors' own, and was seconds of its import
    importlib.import_module("torch")
    with claim_output(out, overwrite, copied) as claim:
        tmp = claim.tmp
        if adapter_only:
            result = write_peft_adapter(
                adapter, manifest, base, paths, tmp, dtype, verify, progress, allow_nonfinite
            )
        else:
            result = write_merged_lora(
                adapter,
                base,
                assets,
                asset_location,
                tmp,
                dtype,
                max_shard_size,
                verify,
                progress,
                base_progress,
                allow_nonfinite,
            )
            result.notes += moved or _weights_not_from_hf_config(hf_config, base)
        if verify:  # bytes flipped after save match their own reads: hash them too
            result.mismatches = manifest_hash_errors(paths) + (result.mismatches or [])
        publish_verified(claim, result)
    return result.published(out, started).read_from(str(paths.dist_ckpt), paths)


def _lora_manifest_of(ckpt: str | os.PathLike, paths: layout.CheckpointPaths) -> Manifest:
    """The manifest of the step `paths` resolved, which must record an adapter. Read from
    that one resolution: resolved again, a run dir saving meanwhile gave the manifest of one
    step and the adapter files of the next."""
    try:
        manifest = read_manifest(paths.manifest) if paths.manifest else None
    except (ManifestError, OSError):
        manifest = None
    if manifest is None or manifest.lora is None:
        raise ExportUsageError(
            f"{ckpt}: not a local LoRA checkpoint (its manifest records no adapter); "
            "--adapter-only needs one"
        )
    return manifest


def _refuse_if_invalid(
    paths: layout.CheckpointPaths, base: BaseModelRecord | None, adapter_only: bool
) -> None:
    """validate's cheap checks, as every export runs them; an adapter-only export does not
    need the base, so findings about the base dir do not block it."""
    step_dir = paths.step_dir
    assert step_dir is not None  # a LoRA manifest was found: it lives in a step dir
    report = validate_checkpoint(step_dir)
    base_dir = base.path if base is not None and base.path else None

    def blocks(where: str) -> bool:
        return not (adapter_only and base_dir is not None and where.startswith(base_dir))

    errors = [
        f"{f.where}: {f.message}"
        for f in report.findings
        if f.severity == ERROR and blocks(f.where)
    ]
    if errors:
        raise invalid_checkpoint(errors, step_dir)


def _refuse_unrecorded_base(base: BaseModelRecord | None, paths: layout.CheckpointPaths) -> None:
    """A step whose base record lists no file (`unrecorded_base`: written before a run
    from a checkpoint recorded its files) names no bytes a merge could check the base
    against: refused, with the export that needs no base."""
    unrecorded = unrecorded_base(base) if base is not None else None
    if unrecorded is not None:
        raise ExportError(
            f"{paths.manifest}: {unrecorded}; export the adapter with --adapter-only, which"
            " needs no base"
        )


def _refuse_random_init_base(base: BaseModelRecord | None, ckpt: str | os.PathLike) -> None:
    """A step whose base was a random init has no base weights a merge could go onto:
    refused naming the checkpoint given, before the output is claimed (`open_base` said
    it later, naming no checkpoint)."""
    if base_weights_dir(base) is None:
        raise ExportUsageError(
            f"{ckpt}: the base model was a random init: there is nothing to merge onto;"
            " give --adapter-only to export the adapter alone"
        )


def _refuse_rewritten_base(manifest: Manifest, paths: layout.CheckpointPaths) -> None:
    """A run started from an adapter whose init_lora_weights rewrote the base as peft
    injected it (PiSSA, OLoRA, ...; training refuses those now) trained on that rewritten
    base: merged onto the base on disk it is another model. Its PEFT adapter is not: peft
    redoes the rewrite when it loads one."""
    assert manifest.lora is not None  # _lora_manifest_of() returns only manifests with one
    init = manifest.lora.get("init_lora_weights", True)
    if not plain_lora_init(init):
        raise ExportError(
            f"{paths.manifest}: the adapter's init_lora_weights {cut_to(repr(init), 120)} rewrote"
            " the base"
            " weights it trained on, so a merge onto the base on disk is not the trained"
            " model; export it with --adapter-only (peft redoes that rewrite on load)"
        )


def _merged_assets(
    paths: layout.CheckpointPaths, reader: CheckpointReader, hf_config: str | os.PathLike | None
) -> tuple[AssetFiles, str]:
    """(the config and tokenizer files the merged model gets, where from): --hf-config's (a
    model dir's model files, `asset_files`) or the checkpoint's own huggingface/ (whole).
    A config.json that contradicts the checkpoint's own (another head split, an untied head
    over a tied one) is refused before anything is written, as the full export refuses it
    (`refuse_config_against_record`): the merge would write the base's tensors under a
    model they are not."""
    location = str(hf_config) if hf_config is not None else str(paths.hf_assets)
    assets = AssetFiles({})
    if Path(location).exists():
        assets = (
            asset_files(location, "local", whole=True)
            if hf_config is None
            else given_assets(location, "local")  # what it refuses is the argument's: exit 2
        )
    if HF_CONFIG_FILE not in assets:
        raise no_config_json(location, hf_config, paths)
    refuse_config_against_record(source_for(paths, reader), paths, location, assets, hf_config)
    return assets, location


def _base_where_it_is(
    base: BaseModelRecord | None, hf_config: str | os.PathLike | None
) -> tuple[BaseModelRecord | None, list[str]]:
    """The base to merge onto, and a note when it is not where the manifest records it: a
    checkpoint copied to another machine finds its base there under another path, which
    --hf-config names (before, the merge stopped at "not present here" with no way to say
    where it is). That dir must hold the recorded weight files byte for byte
    (`lora_base.open_base` hashes them), so another model is refused, never merged onto. A
    base that is a checkpoint (`records_dcp`) is no model dir --hf-config could name."""
    if base is None or base.path is None or base.random_init or os.path.isdir(base.path):
        return base, []
    if records_dcp(base):  # a checkpoint moved: no --hf-config dir holds its files
        return base, []
    dirs = model_dirs_of(hf_config)
    if len(dirs) != 1:
        return base, []
    note = (
        f"the adapter's base is not at {base.path}, where the manifest records it: merged"
        f" onto --hf-config {dirs[0]}, which holds its weight files byte for byte"
    )
    return replace(base, path=str(dirs[0])), [note]


def _weights_not_from_hf_config(
    hf_config: str | os.PathLike | None, base: BaseModelRecord | None
) -> list[str]:
    """A note when --hf-config names another dir than the adapter's base: the merge takes
    its config and tokenizer files only, the weights are the recorded base's (a user may
    have meant to merge onto that dir, as with a Megatron adapter saved alone)."""
    if hf_config is None or base is None or base.path is None:
        return []
    if model_dirs_of(hf_config) == [Path(base.path).resolve()]:
        return []
    return [
        f"--hf-config {hf_config}: its config and tokenizer files only; the weights merged"
        f" are those of the adapter's base, {base.path}"
    ]
