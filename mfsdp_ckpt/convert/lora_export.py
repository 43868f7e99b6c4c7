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
`export_hf` does: a failure leaves nothing at the output path.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from mfsdp_ckpt.check.report import ERROR
from mfsdp_ckpt.check.validate import (
    invalid_checkpoint,
    manifest_hash_errors,
    validate_checkpoint,
)
from mfsdp_ckpt.convert.export_errors import (
    ExportError,
    ExportUsageError,
    ExportVerifyError,
    NonFiniteError,
)
from mfsdp_ckpt.convert.export_hf import (
    ExportOptions,
    ExportResult,
    PreparedSource,
    check_out_dir,
    model_dirs_of,
    refuse_config_against_record,
    set_config_dtype,
    write_assets,
)
from mfsdp_ckpt.convert.export_plan import choose_dtype
from mfsdp_ckpt.convert.export_scheduler import Progress
from mfsdp_ckpt.convert.export_source import (
    AssetFiles,
    JsonConfig,
    asset_files,
    load_copied_config,
    no_config_json,
    no_tokenizer_in,
    resolve_url,
    source_for,
)
from mfsdp_ckpt.convert.export_verify import bit_pattern
from mfsdp_ckpt.convert.hf_config import HFConfigError, read_config_json
from mfsdp_ckpt.format import checkpoint_resolution, layout, path_urls, state_keys
from mfsdp_ckpt.format.finite import count_nonfinite_tensor
from mfsdp_ckpt.format.manifest import MAX_MANIFEST_BYTES, Manifest, ManifestError, read_manifest
from mfsdp_ckpt.format.model_files import top_level_names
from mfsdp_ckpt.lora import (
    ADAPTER_CONFIG_FILE,
    ADAPTER_WEIGHTS_FILE,
    AdapterKey,
    BaseModelRecord,
    ByteProgress,
    LoraSettings,
    base_model_problems,
    parse_adapter_key,
    peft_name,
    peft_target_modules,
    plain_lora_init,
    read_base_model,
    read_lora_settings,
)
from mfsdp_ckpt.storage.named_writes import write_text
from mfsdp_ckpt.storage.out_dir import claim_output
from mfsdp_ckpt.storage.reader import CheckpointReader
from mfsdp_ckpt.storage.safetensors_source import SafetensorsSource
from mfsdp_ckpt.storage.safetensors_writer import SINGLE_FILE, ShardedSafetensorsWriter, Spec
from mfsdp_ckpt.storage.tensorstore_store import is_url, join_location, open_store

if TYPE_CHECKING:
    import torch
    from transformers import PretrainedConfig

MERGED_LAYOUT, ADAPTER_LAYOUT = "hf (LoRA merged)", "peft adapter"


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


# why an export that writes a PEFT adapter or streams a LoRA merge has no use for a flag
_ONE_ADAPTER_FILE = (
    "an adapter export writes one adapter_model.safetensors, the one file PEFT and vLLM load"
)
_ONE_AT_A_TIME = "a LoRA export reads, merges and writes one tensor at a time, in one thread"


def export_lora_kind(
    ckpt: str | os.PathLike, out_dir: str | os.PathLike, options: ExportOptions
) -> ExportResult | None:
    """`export_hf` of a checkpoint that is known to be LoRA before its source is read: an
    mfsdp LoRA checkpoint (its manifest says so; `export_lora`), or with `adapter_only` a
    Megatron or PEFT adapter (`export_megatron_adapter`). None for any other checkpoint,
    whose export reads its source first. Each refuses the flags it has no use for (exit 2),
    and --lora-alpha for an mfsdp LoRA checkpoint, whose manifest records its alpha."""
    from mfsdp_ckpt.convert.megatron_lora_export import (  # it builds on this module
        export_megatron_adapter,
    )

    mfsdp_lora = lora_manifest(ckpt, options.io) is not None
    if not mfsdp_lora and options.adapter_only:
        flags = _megatron_adapter_flags(
            options.layout_name, options.max_shard_size, options.workers
        )
        return export_megatron_adapter(
            ckpt,
            out_dir,
            dtype=options.dtype,
            hf_config=options.hf_config,
            verify=options.verify,
            overwrite=options.overwrite,
            io=options.io,
            role=options.role,
            lora_alpha=options.lora_alpha,
            progress=options.progress,
            drop_mtp=options.drop_mtp,
            allow_nonfinite=options.allow_nonfinite,
            refuse_flags=lambda: _refuse_flags_not_taken(flags),
        )
    if not mfsdp_lora:
        return None
    if options.lora_alpha is not None:
        raise ExportUsageError(
            f"--lora-alpha: {ckpt} is an mfsdp LoRA checkpoint, whose manifest records its"
            " alpha; leave --lora-alpha out"
        )
    _refuse_flags_not_taken(_mfsdp_lora_flags(ckpt, options))
    return export_lora(
        ckpt,
        out_dir,
        adapter_only=options.adapter_only,
        dtype=options.dtype,
        max_shard_size=options.shard_size,
        hf_config=options.hf_config,
        verify=options.verify,
        overwrite=options.overwrite,
        progress=options.progress,
        base_progress=options.base_progress,
        role=options.role,
        allow_nonfinite=options.allow_nonfinite,
    )


def merge_adapter_saved_alone(
    prepared: PreparedSource, out: Path, options: ExportOptions
) -> ExportResult | None:
    """`export_hf` of a Megatron adapter saved without its base, merged onto the base in
    --hf-config (`merge_onto_base`); None when there is no --hf-config or the checkpoint
    holds base weights. Known only once its source is read (`prepared`); refuses the
    flags a merge has no use for (exit 2)."""
    from mfsdp_ckpt.convert.megatron_lora_export import (  # it builds on this module
        adapter_only_checkpoint,
        merge_onto_base,
    )

    if options.hf_config is None or not adapter_only_checkpoint(prepared.source):
        return None
    _refuse_flags_not_taken(_megatron_adapter_flags(options.layout_name, None, options.workers))
    return merge_onto_base(
        prepared,
        options.hf_config,
        out,
        dtype=options.dtype,
        max_shard_size=options.shard_size,
        verify=options.verify,
        overwrite=options.overwrite,
        lora_alpha=options.lora_alpha,
        progress=options.progress,
        drop_mtp=options.drop_mtp,
        allow_nonfinite=options.allow_nonfinite,
    )


def _refuse_flags_not_taken(flags: dict[str, str | None]) -> None:
    """Refuse (exit 2) the first flag given that the chosen export has no use for, naming
    it and why: each such flag was ignored without a word. `flags` maps each flag, as
    typed, to why it is not taken, or None where it is taken or was not given."""
    for flag, why in flags.items():
        if why is not None:
            raise ExportUsageError(f"{flag}: {why}; leave {flag.split()[0]} out")


def _mfsdp_lora_flags(ckpt: str | os.PathLike, options: ExportOptions) -> dict[str, str | None]:
    """The flags an mfsdp LoRA checkpoint's export (`export_lora`) has no use for: it is
    local and named as Hugging Face names it (`--layout hf`, `--io local` are what it does)."""
    lora = f"{ckpt} is an mfsdp LoRA checkpoint"
    layout_name, io = options.layout_name, options.io
    return {
        f"--layout {layout_name}": (
            f"{lora}, its adapter and base named as Hugging Face names them"
            if layout_name == "mcore"
            else None
        ),
        "--max-shard-size": (
            _ONE_ADAPTER_FILE
            if options.adapter_only and options.max_shard_size is not None
            else None
        ),
        "--workers": _ONE_AT_A_TIME if options.workers is not None else None,
        f"--io {io}": f"{lora}, read from its local files" if io == "tensorstore" else None,
    }


def _megatron_adapter_flags(
    layout_name: str, max_shard_size: int | None, workers: int | None
) -> dict[str, str | None]:
    """The flags the export of a Megatron or PEFT adapter saved alone has no use for, as a
    PEFT adapter (`export_megatron_adapter`) or merged onto --hf-config's base
    (`merge_onto_base`): neither takes a layout or threads (both take --allow-nonfinite,
    refusing NaN/Inf without it)."""
    return {
        f"--layout {layout_name}": (
            "a LoRA adapter is read under the names it was saved with"
            if layout_name != "auto"
            else None
        ),
        "--max-shard-size": _ONE_ADAPTER_FILE if max_shard_size is not None else None,
        "--workers": _ONE_AT_A_TIME if workers is not None else None,
    }


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
    manifest = lora_manifest(ckpt)
    if manifest is None:
        raise ExportUsageError(
            f"{ckpt}: not a local LoRA checkpoint (its manifest records no adapter); "
            "--adapter-only needs one"
        )
    paths = checkpoint_resolution.resolve_checkpoint(ckpt, role=role)
    try:
        base = read_base_model(manifest, str(paths.manifest))
    except ManifestError as err:
        raise ExportError(str(err)) from None
    _refuse_if_invalid(paths, base, adapter_only)
    adapter = _read_adapter(paths, manifest)
    out = Path(out_dir)
    keep = [p.resolve() for p in (paths.dist_ckpt, paths.step_dir, paths.run_dir) if p is not None]
    check_out_dir(out, keep, model_dirs_of(hf_config, base.path if base else None))
    if not adapter_only:
        _refuse_rewritten_base(manifest, paths)
        assets, asset_location = _merged_assets(paths, adapter.reader, hf_config)
        base, moved = _base_where_it_is(base, hf_config)
    copied = top_level_names(assets) if not adapter_only else ()
    with claim_output(out, overwrite, copied) as claim:
        tmp = claim.tmp
        if adapter_only:
            result = _write_adapter(
                adapter, manifest, base, paths, tmp, dtype, verify, progress, allow_nonfinite
            )
        else:
            result = _write_merged(
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
            if result.mismatches:
                raise ExportVerifyError(result.mismatches)
        claim.publish_synced()
    result.out_dir, result.seconds = str(out), time.monotonic() - started
    return result


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


def _refuse_rewritten_base(manifest: Manifest, paths: layout.CheckpointPaths) -> None:
    """A run started from an adapter whose init_lora_weights rewrote the base as peft
    injected it (PiSSA, OLoRA, ...; training refuses those now) trained on that rewritten
    base: merged onto the base on disk it is another model. Its PEFT adapter is not: peft
    redoes the rewrite when it loads one."""
    assert manifest.lora is not None  # lora_manifest() returns only manifests with one
    init = manifest.lora.get("init_lora_weights", True)
    if not plain_lora_init(init):
        raise ExportError(
            f"{paths.manifest}: the adapter's init_lora_weights {init!r:.120} rewrote the base"
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
        assets = asset_files(location, "local", whole=hf_config is None)
    if "config.json" not in assets:
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
    (`_base_source` hashes them), so another model is refused, never merged onto."""
    if base is None or base.path is None or base.random_init or os.path.isdir(base.path):
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


# --------------------------------------------------------------------------- the adapter
@dataclass
class _Adapter:
    """The stored adapter: per adapted module, the checkpoint keys of its A and B."""

    reader: CheckpointReader
    modules: dict[str, dict[str, str]]  # module path -> {"A": key, "B": key}
    settings: LoraSettings

    def keys(self) -> list[tuple[AdapterKey, str]]:
        return [
            (AdapterKey(module, which, "default"), pair[which])
            for module, pair in sorted(self.modules.items())
            for which in ("A", "B")
        ]

    def delta(self, module: str) -> torch.Tensor:
        """scale * B @ A in fp32: what PEFT adds to the module's weight."""
        pair = self.modules[module]
        a = self.reader.read_tensor(pair["A"]).float()
        b = self.reader.read_tensor(pair["B"]).float()
        return (b @ a) * self.settings.scale


def _read_adapter(paths: layout.CheckpointPaths, manifest: Manifest) -> _Adapter:
    """Pair up the stored lora_A / lora_B tensors and check them against the recorded rank."""
    try:
        settings = read_lora_settings(manifest, str(paths.manifest))
    except ManifestError as err:
        raise ExportError(str(err)) from None
    reader = CheckpointReader(paths.dist_ckpt)
    where = paths.dist_ckpt
    modules: dict[str, dict[str, str]] = {}
    roots = state_keys.state_roots(reader.tensors)
    for key in roots.weight_keys(reader.tensors):
        parsed = parse_adapter_key(roots.module_path(key))
        if parsed is None:
            raise ExportError(f"{where} [{key}]: not an adapter weight, yet the manifest says LoRA")
        modules.setdefault(parsed.module, {})[parsed.which] = key
    if not modules:
        raise ExportError(f"{where}: no adapter weights (no lora_A / lora_B tensors)")
    for module, pair in sorted(modules.items()):
        if set(pair) != {"A", "B"}:
            raise ExportError(f"{where}: {module} has lora_{''.join(pair)} only, not both A and B")
        a, b = reader.tensors[pair["A"]].shape, reader.tensors[pair["B"]].shape
        if len(a) != 2 or len(b) != 2 or a[0] != settings.rank or b[1] != settings.rank:
            raise ExportError(
                f"{where}: {module} lora_A {a} / lora_B {b} do not fit rank {settings.rank}"
            )
    return _Adapter(reader, modules, settings)


def _write_adapter(
    adapter: _Adapter,
    manifest: Manifest,
    base: BaseModelRecord | None,
    paths: layout.CheckpointPaths,
    tmp: Path,
    dtype: str,
    verify: bool,
    progress: Progress | None,
    allow_nonfinite: bool,
) -> ExportResult:
    """adapter_model.safetensors (PEFT's names; `auto` keeps the stored dtype) and the
    recorded PEFT config as adapter_config.json, its target_modules naming exactly the
    stored adapters' modules (`peft_target_modules`: a run whose target_modules regex
    picked some layers recorded their own names, q_proj, ..., which adapt every layer)."""
    stored = adapter.reader.tensors
    out_dtype = {key: choose_dtype(dtype, None, [stored[key]]) for _, key in adapter.keys()}

    def tensor(key: str) -> torch.Tensor:
        return adapter.reader.read_tensor(key).to(out_dtype[key].torch)

    targets = {peft_name(parsed): key for parsed, key in adapter.keys()}
    specs: list[Spec] = [(name, out_dtype[key], stored[key].shape) for name, key in targets.items()]
    writer = ShardedSafetensorsWriter(tmp, specs, max_shard_bytes=sys.maxsize)  # PEFT: one file
    converting = time.monotonic()
    written = finite_only(
        lambda name: tensor(targets[name]),
        lambda name: f"{paths.dist_ckpt} [{targets[name]}]",
        allow_nonfinite,
    )
    write_all(writer, list(targets), written, progress)
    convert_seconds = time.monotonic() - converting
    os.replace(tmp / SINGLE_FILE, tmp / ADAPTER_WEIGHTS_FILE)
    assert manifest.lora is not None  # lora_manifest() returns only manifests with one
    config = dict(
        manifest.lora,
        base_model_name_or_path=base.path if base is not None else None,
        target_modules=peft_target_modules(adapter.modules, _layer_count(paths)),
    )
    write_text(tmp / ADAPTER_CONFIG_FILE, json.dumps(config, indent=2, sort_keys=True) + "\n")
    mismatches, verify_seconds = None, None
    if verify:
        verifying = time.monotonic()
        mismatches = compare_written(
            tmp / ADAPTER_WEIGHTS_FILE, list(targets), lambda name: tensor(targets[name])
        )
        verify_seconds = time.monotonic() - verifying
    written_dtypes = ",".join(sorted({d.name for d in out_dtype.values()}))
    return ExportResult(
        "",
        ADAPTER_LAYOUT,
        manifest.model_family or "",
        written_dtypes,
        len(specs),
        writer.total_bytes,
        [ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE],
        0.0,
        mismatches,
        convert_seconds=convert_seconds,
        verify_seconds=verify_seconds,
    )


def _layer_count(paths: layout.CheckpointPaths) -> int | None:
    """num_hidden_layers of the config.json the checkpoint keeps (None when it keeps none
    that says: then target_modules names every adapted module in full)."""
    if paths.hf_dir is None:
        return None
    try:
        count = read_config_json(paths.hf_dir, paths.root)[1].get("num_hidden_layers")
    except HFConfigError:
        return None
    return count if isinstance(count, int) and not isinstance(count, bool) else None


# --------------------------------------------------------------------------- merged
def _base_source(base: BaseModelRecord | None, progress: ByteProgress | None) -> SafetensorsSource:
    """The base's safetensors weights as training loaded them (`SafetensorsSource` picks the
    files transformers does: a stray model_old.safetensors or Mistral's consolidated file
    beside them is not read), after checking that the base on disk is, byte for byte, the
    one the adapter was trained on (hashing all of it, reported to `progress`). Its files
    may lead anywhere, as in training: the base is the run's own model dir."""
    if base is None or base.path is None or base.random_init:
        raise ExportError(
            "the base model was a random init: there is nothing to merge onto "
            "(export the adapter with --adapter-only)"
        )
    errors, notes = base_model_problems(base, deep=True, progress=progress)
    if errors or notes:
        where, what = errors[0] if errors else (base.path, notes[0])
        raise ExportError(
            f"{where}: {what}; a merged export needs that exact base (--hf-config DIR names"
            " where it is now), or use --adapter-only"
        )
    return SafetensorsSource(base.path, links_anywhere=True)


def _write_merged(
    adapter: _Adapter,
    base: BaseModelRecord | None,
    assets: AssetFiles,
    asset_location: str,
    tmp: Path,
    dtype: str,
    max_shard_size: int,
    verify: bool,
    progress: Progress | None,
    base_progress: ByteProgress | None,
    allow_nonfinite: bool,
) -> ExportResult:
    """The HF model dir: `assets` (from `asset_location`: `_merged_assets`), and every base
    tensor (adapted ones merged) in the export dtype (`auto`: the config's)."""
    write_assets(assets, tmp)
    config = load_copied_config(tmp / "config.json", asset_location)
    source = _base_source(base, base_progress)
    adapted = _check_fits_base(adapter, source)
    deltas = {name: functools.partial(adapter.delta, module) for name, module in adapted.items()}
    return write_merged(
        config,
        assets,
        asset_location,
        source,
        deltas,
        tmp,
        dtype,
        max_shard_size,
        verify,
        progress,
        allow_nonfinite=allow_nonfinite,
    )


def write_merged(
    config: JsonConfig | PretrainedConfig,
    assets: AssetFiles,
    asset_location: str,
    source: SafetensorsSource,
    deltas: Mapping[str, Callable[[], torch.Tensor]],
    tmp: Path,
    dtype: str,
    max_shard_size: int,
    verify: bool,
    progress: Progress | None,
    *,
    allow_nonfinite: bool = False,
    adapter_notes: Sequence[str] = (),
) -> ExportResult:
    """Every tensor of the base model `source` (those in `deltas` plus their fp32 delta) in
    the export dtype (`auto`: the config's) into `tmp`, where the config and assets already
    are; one base tensor and its delta in memory at a time. One holding NaN/Inf is refused
    unless `allow_nonfinite` (`finite_only`). Its notes: a missing tokenizer, then
    `adapter_notes` (what reading the adapter found), then the `assets` left out, so that
    each LoRA kind that merges reports the same things in the same order."""
    tensors = source.tensors
    out_dtype = choose_dtype(dtype, config, [])
    dtypes = {
        name: out_dtype if t.dtype.is_floating_point else t.dtype for name, t in tensors.items()
    }
    # base files in turn, each tensor once: the writer plans offsets, so the order is free
    order = sorted(tensors, key=lambda name: tensors[name].file)
    specs: list[Spec] = [(name, dtypes[name], tensors[name].shape) for name in order]
    writer = ShardedSafetensorsWriter(tmp, specs, max_shard_size)

    def merged(name: str) -> torch.Tensor:
        tensor = source.read(name)
        if name in deltas:
            tensor = tensor.float() + deltas[name]()
        return tensor.to(dtypes[name].torch)

    def where(name: str) -> str:
        return f"{source.root} [{name}] ({'merged with the adapter' if name in deltas else 'base'})"

    converting = time.monotonic()
    write_all(writer, order, finite_only(merged, where, allow_nonfinite), progress)
    convert_seconds = time.monotonic() - converting
    set_config_dtype(tmp / "config.json", out_dtype)
    mismatches, verify_seconds = None, None
    if verify:
        verifying, mismatches = time.monotonic(), []
        for file in sorted(writer.files):
            written = [name for name in order if writer.slots[name].file == file]
            mismatches += compare_written(tmp / file, written, merged)
        verify_seconds = time.monotonic() - verifying
    notes = (
        []
        if any(n.startswith("tokenizer") for n in assets)
        else [f"{no_tokenizer_in(asset_location)}; AutoTokenizer will not load the export"]
    )
    notes += [*adapter_notes, *assets.left_out_note(asset_location)]
    return ExportResult(
        "",
        MERGED_LAYOUT,
        config.model_type,
        out_dtype.name,
        len(order),
        writer.total_bytes,
        sorted(writer.files),
        0.0,
        mismatches,
        notes,
        convert_seconds=convert_seconds,
        verify_seconds=verify_seconds,
    )


def _check_fits_base(adapter: _Adapter, source: SafetensorsSource) -> dict[str, str]:
    """{base weight name: module} for every adapted module; each must exist with B @ A's shape."""
    adapted = {}
    root = source.root
    for module, pair in adapter.modules.items():
        name = f"{module}.weight"
        target = source.tensors.get(name)
        stored = adapter.reader.tensors
        rows, cols = stored[pair["B"]].shape[0], stored[pair["A"]].shape[1]
        if target is None:
            raise ExportError(f"{root}: the base has no {name} for the adapter on {module}")
        if target.shape != (rows, cols):
            raise ExportError(
                f"{root} [{name}]: shape {target.shape}, the adapter needs {(rows, cols)}"
            )
        adapted[name] = module
    return adapted


# --------------------------------------------------------------------------- shared
def finite_only(
    compute: Callable[[str], torch.Tensor], where: Callable[[str], str], allow_nonfinite: bool
) -> Callable[[str], torch.Tensor]:
    """`compute`, refusing (NonFiniteError, naming `where(name)`) a tensor that holds
    NaN/Inf as it is written, unless `allow_nonfinite`: every other export refuses one, a
    LoRA export wrote a diverged adapter, or the model merged with it, without a word."""
    if allow_nonfinite:
        return compute

    def checked(name: str) -> torch.Tensor:
        tensor = compute(name)
        count = count_nonfinite_tensor(tensor)
        if count:
            dtype = str(tensor.dtype).removeprefix("torch.")
            raise NonFiniteError(
                f"{where(name)}: {count} NaN/Inf value(s) as {dtype} (a diverged run?);"
                " --allow-nonfinite exports it anyway"
            )
        return tensor

    return checked


def write_all(
    writer: ShardedSafetensorsWriter,
    order: list[str],
    compute: Callable[[str], torch.Tensor],
    progress: Progress | None,
) -> None:
    """Write each tensor in `order`, one in memory at a time; on failure nothing is kept."""
    writer.open()
    try:
        written = 0
        for done, name in enumerate(order, 1):
            writer.write(name, compute(name))
            written += writer.slots[name].nbytes
            if progress is not None:
                progress(done, len(order), written, writer.total_bytes)
        writer.close()
    except BaseException:
        writer.abort()
        raise


def compare_written(
    file: Path, names_in_file: list[str], expected: Callable[[str], torch.Tensor]
) -> list[str]:
    """Bit-for-bit comparison of each written tensor with a fresh computation of it."""
    import torch
    from safetensors import safe_open

    problems = []
    with safe_open(str(file), framework="pt") as handle:
        present = set(handle.keys())
        for name in names_in_file:
            if name not in present:
                problems.append(f"{name}: missing from {file}")
                continue
            written, wanted = handle.get_tensor(name), expected(name)
            same = written.dtype == wanted.dtype and written.shape == wanted.shape
            if not same or not torch.equal(bit_pattern(written), bit_pattern(wanted)):
                problems.append(f"{name}: differs in {file} from what its sources give")
    return problems
