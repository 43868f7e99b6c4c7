"""Export a DCP checkpoint (ours, FSDP2, Megatron-FSDP, Megatron-core fsdp_dtensor) to a
Hugging Face model directory, on CPU, in bounded memory.

How it stays small and fast:

* planning first: names are mapped (`name_maps`), every output shape is checked against
  the HF config (for Qwen2/Qwen3/Llama from config.json alone, without importing
  transformers) and the safetensors layout is fixed before a byte of weight is read;
* streaming: a tensor that keeps its name is copied file-to-file in the kernel, or cast
  a 4 MiB piece at a time through per-thread buffers, so it never sits in memory whole;
  a tensor that is split or de-interleaved (mcore QKV, gate/up) is read whole, converted
  and `pwrite`n at its planned offset, under a byte budget of the largest one plus a
  fixed buffer. Peak memory does not grow with the model. Each output file has one
  writer at a time (concurrent writes into one file were slower); other threads read
  and convert meanwhile;
* atomic: everything is written into a hidden sibling directory that is renamed into
  place at the end; any failure or Ctrl-C removes it, so there is never a half export;
* no torch unless a tensor's values change: planning, the kernel copy and every check
  before it use plain dtype records (`mfsdp_ckpt.format.dtypes`). torch is imported where a cast,
  a split or `--verify` first needs it, or a blob is not raw bytes and must be decoded.
  Its import is a start-up cost on the order of `cp`'s whole copy (bench/export_hf.py's
  "start-up + import torch" row, docs/benchmarks.md).

This module runs an export from end to end; each step lives in its own module:
`export_source` (the checkpoint, its HF assets and config), `export_plan` (names, shapes,
dtypes), `export_scheduler` (threads under the byte budget), `export_stream` (kernel copy
and piecewise cast), `export_verify` (--verify), `export_errors`.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mfsdp_ckpt.check.removed_while_read import reads_checkpoint
from mfsdp_ckpt.check.validate import manifest_hash_errors, require_valid
from mfsdp_ckpt.convert.conversion_result import ConversionResult
from mfsdp_ckpt.convert.export_errors import ExportUsageError, ExportVerifyError
from mfsdp_ckpt.convert.export_plan import ExportPlan, convert, plan_export, task_cost
from mfsdp_ckpt.convert.export_scheduler import MIN_BUFFER_BYTES, Progress, run_tasks
from mfsdp_ckpt.convert.export_source import (
    AssetFiles,
    ExportSource,
    asset_files,
    bridge_tokenizer_dir,
    check_generation_config,
    config_json_location,
    load_copied_config,
    no_config_json,
    no_tokenizer_in,
    resolve_source,
    weights_summary,
)
from mfsdp_ckpt.convert.export_stream import (
    PieceBuffers,
    is_streamable,
    nonfinite_error,
    stream_tensor,
)
from mfsdp_ckpt.convert.export_verify import verify_export
from mfsdp_ckpt.convert.hf_config import (
    MAX_LAYERS,
    parse_config_json,
    read_config_json,
    refuse_unloadable,
    weights_file_problem,
)
from mfsdp_ckpt.convert.megatron_config import (
    DerivedConfig,
    MegatronConfigError,
    MegatronSettingsMissing,
)
from mfsdp_ckpt.convert.megatron_lora_alpha import set_lora_scale
from mfsdp_ckpt.convert.megatron_record import has_recorded_config, recorded_config
from mfsdp_ckpt.convert.mtp import MtpLayers
from mfsdp_ckpt.convert.name_maps import MappedTensor
from mfsdp_ckpt.convert.record_agreement import (
    contradiction,
    refuse_uncomputable,
    unchecked_note,
    unrecorded_note,
)
from mfsdp_ckpt.convert.recorded_vocab import fit_config_file
from mfsdp_ckpt.convert.units import gb_per_s, took
from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.format import checkpoint_resolution, layout, step_saving
from mfsdp_ckpt.format.dtypes import DType
from mfsdp_ckpt.format.file_hash import ByteProgress
from mfsdp_ckpt.format.finite import count_nonfinite_tensor
from mfsdp_ckpt.format.generation_config import GENERATION_CONFIG_FILE
from mfsdp_ckpt.format.hub_id import missing_hf_config
from mfsdp_ckpt.format.model_files import top_level_names
from mfsdp_ckpt.format.output_inside import inside_checkpoint
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.named_writes import write_bytes, write_text
from mfsdp_ckpt.storage.out_dir import claim_output
from mfsdp_ckpt.storage.safetensors_writer import ShardedSafetensorsWriter
from mfsdp_ckpt.storage.tensor_memory import tensor_memory
from mfsdp_ckpt.storage.tensorstore_store import is_url, join_location
from mfsdp_ckpt.storage.writable import require_writable_dir


@dataclass
class ExportResult(ConversionResult):
    files: list[str]
    seconds: float
    mismatches: list[str] | None = None  # None: not verified
    notes: list[str] = field(default_factory=list)
    dropped_mtp: dict[str, int] | None = None  # {"layers", "tensors"} left out by --drop-mtp
    # `seconds` is the whole command's, start-up included (reading the checkpoint's metadata;
    # --verify first imports transformers to build config.json, seconds alone): the rates
    # are the tensors' own. None: not timed apart from `seconds` (convert), not verified.
    convert_seconds: float | None = None  # reading, converting and writing the tensors
    verify_seconds: float | None = None  # --verify: reading them back, comparing, hashing

    def left_out(self, mtp: MtpLayers | None) -> None:
        """Record the multi-token prediction layers the export left out, and note them."""
        if mtp is not None:
            self.dropped_mtp = mtp.counts()
            self.notes.append(mtp.dropped_note())

    @property
    def gb_per_s(self) -> float:
        """The bytes over the whole command's `seconds` (`convert_gb_per_s`: the export's)."""
        return gb_per_s(self.bytes, self.seconds) or 0.0

    @property
    def verify_gb_per_s(self) -> float | None:
        return gb_per_s(self.bytes, self.verify_seconds)

    def summary(self) -> str:
        verified = ""
        if self.mismatches == []:
            timed = (
                "" if self.verify_seconds is None else f" {took(self.bytes, self.verify_seconds)}"
            )
            verified = f" verified{timed},"
        return (
            f"exported {self.converted()},{verified} {self.seconds:.1f} s in all,"
            f" {len(self.files)} file(s), {self.dtype}, layout {self.layout},"
            f" {self.model_type} -> {self.out_dir}"
        )


def parse_size(text: str) -> int:
    """`5GB`, `500MB`, `2GiB`, `1000000` -> bytes (decimal units as in transformers)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B?)\s*", text, re.IGNORECASE)
    if not match:
        raise ExportUsageError(
            f"--max-shard-size {text!r}: expected e.g. 5GB, 500MB or a byte count"
        )
    number, unit = float(match.group(1)), match.group(2).upper().rstrip("B")
    scale = {
        "": 1,
        "K": 10**3,
        "M": 10**6,
        "G": 10**9,
        "T": 10**12,
        "KI": 2**10,
        "MI": 2**20,
        "GI": 2**30,
        "TI": 2**40,
    }[unit]
    if number * scale < 1:
        raise ExportUsageError(f"--max-shard-size {text!r}: must be at least one byte")
    return int(number * scale)


def check_out_dir(out: Path, protected: list[Path], model_dirs: Sequence[Path] = ()) -> None:
    """Refuse an --out that would replace or write into what the command reads: the
    checkpoint (`protected`: out may not be it or above it, nor lie inside a checkpoint)
    and the Hugging Face model dirs it reads (`model_dirs`: --hf-config, a LoRA base,
    import's source). Those are a user's downloads, and a model dir looks like an earlier
    export: out may not be one or above one, or --overwrite would replace it. Also refuse
    one whose parent cannot be written, where the work dir and lock file go, before any work."""
    require_writable_dir("--out", out, beside=True, error=ExportUsageError)
    resolved = out.resolve()
    for keep in protected:
        if resolved == keep or resolved in keep.parents:
            raise ExportUsageError(
                f"{out}: holds the checkpoint being exported; choose another --out"
            )
    for model_dir in model_dirs:
        if resolved == model_dir or resolved in model_dir.parents:
            raise ExportUsageError(
                f"{out}: is or holds the model dir {model_dir} this command reads;"
                " choose another --out"
            )
    inside = inside_checkpoint(resolved)
    if inside is not None:
        raise ExportUsageError(
            f"{out}: {inside}; choose an --out outside it"
            " (--overwrite replaces only an empty directory or an earlier export)"
        )


def model_dirs_of(*locations: str | os.PathLike | None) -> list[Path]:
    """The local directories of the HF model locations given (a dir, or its config.json),
    resolved, for `check_out_dir`; URLs and missing paths name none. A config.json's dir
    is the one it sits in, not where a link leads (a Hugging Face cache snapshot links
    config.json into ../../blobs/)."""
    dirs = []
    for location in locations:
        if location is None or is_url(str(location)) or not os.path.exists(location):
            continue
        path = Path(os.path.abspath(location))
        dirs.append((path if path.is_dir() else path.parent).resolve())
    return dirs


# How many more layers config.json may name than the checkpoint's names hold; a few more
# get the "checkpoint lacks weights" message that names one, many more are refused early.
LAYER_TOLERANCE = 8


_LAYER_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def _layer_cap(source: ExportSource) -> int:
    """The most layers config.json may claim for this checkpoint: the layer indices its
    weight names hold plus a tolerance, and never above hf_config.MAX_LAYERS."""
    found = (_LAYER_INDEX.search(name) for name in source.reader.tensors)
    indices = {int(match.group(1)) for match in found if match}
    return min(MAX_LAYERS, len(indices) + LAYER_TOLERANCE)


def _check_backed(plan: ExportPlan) -> None:
    """Every chunk the plan reads lies inside its file and can hold its elements (or, stored
    compressed, can be decoded here), so the sizes the output is checked to have room for
    are backed by bytes (metadata claiming 1 TiB over a 1 KB blob is refused before the
    free-space check says the disk is too small for it)."""
    reader = plan.source.reader
    adapters = plan.lora.adapter_keys if plan.lora is not None else []
    for entry in [plan.entry(item) for item in plan.items] + [reader.tensors[k] for k in adapters]:
        for chunk in entry.chunks:
            if chunk.numel:
                reader._check_stored(entry, chunk)


def write_assets(assets: dict[str, Callable[[], bytes]], target: Path) -> None:
    for name, load in assets.items():
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(path, load())


def set_config_dtype(config_file: Path, dtype: DType) -> None:
    """The exported config names the dtype actually written, as save_pretrained does."""
    data = read_config_json(config_file)[1]  # bounded, as every read of a config.json
    data["dtype"] = dtype.name
    if "torch_dtype" in data:
        data["torch_dtype"] = dtype.name
    write_text(config_file, json.dumps(data, indent=2, sort_keys=True) + "\n")


def _no_config_message(source: ExportSource, lacking: str = "") -> str:
    return (
        f"{source.location}: the checkpoint holds no Hugging Face config (Megatron-LM saves"
        " none, nor does the HF Trainer with SHARDED_STATE_DICT; verl keeps it in"
        f" {layout.HF_ASSETS_DIR}/){lacking}; pass --hf-config with the"
        " Hugging Face model dir the run started from (config.json, and tokenizer files for"
        f" AutoTokenizer){weights_summary(source.reader.tensors)}"
    )


def _derived_config(
    source: ExportSource, paths: layout.CheckpointPaths | None
) -> DerivedConfig | None:
    """The config a Megatron checkpoint's own record (Bridge's run_config.yaml, Megatron-LM's
    args) implies; None when it records none. A record without the model's sizes asks for
    --hf-config (exit 2), naming what it lacks; a model no family here computes is exit 1."""
    try:
        return recorded_config(paths, source.reader)
    except MegatronSettingsMissing as err:
        lacking = f"; its {err.record} lacks {', '.join(err.missing)}"
        raise ExportUsageError(_no_config_message(source, lacking)) from None


def _derived_assets(
    derived: DerivedConfig, paths: layout.CheckpointPaths | None, io: str
) -> AssetFiles:
    """config.json from the record, and the tokenizer files Megatron-Bridge saved into the
    iteration dir (read inside the checkpoint, as its huggingface/ files are; none through
    a URL)."""
    text = json.dumps(derived.config, indent=2, sort_keys=True) + "\n"
    assets = AssetFiles({"config.json": text.encode})
    if paths is not None and paths.tokenizer_dir is not None:
        tokenizer_dir = str(bridge_tokenizer_dir(paths.tokenizer_dir))
        tokenizer = asset_files(tokenizer_dir, io, paths.root, whole=True)
        assets.update({n: load for n, load in tokenizer.items() if n != "config.json"})
    return assets


def _config_notes(
    source: ExportSource,
    paths: layout.CheckpointPaths | None,
    derived: DerivedConfig | None,
    hf_config: str | os.PathLike | None,
) -> list[str]:
    """Where config.json came from, when the checkpoint records its model, and when no
    record could be compared with it (`unchecked_note`)."""
    if derived is not None:
        family = derived.config["architectures"][0]
        return [
            f"config.json derived from {derived.source} ({family}); --hf-config DIR overrides it",
            *derived.notes,
        ]
    if paths is None:
        return []
    notes = []
    if hf_config is not None and has_recorded_config(paths, source.reader):
        notes.append(
            f"config.json from --hf-config {hf_config}, not from the checkpoint's own record"
        )
    unchecked = unchecked_note(paths, source.reader)
    if unchecked is None and hf_config is not None:
        unchecked = unrecorded_note(paths, source.reader)
    if unchecked is not None:
        used = f"--hf-config {hf_config}" if hf_config is not None else "its config.json"
        notes.append(f"{used}: {unchecked}")
    return notes


def _no_tokenizer_note(asset_location: str, derived: DerivedConfig | None, out: Path) -> str:
    if derived is None:
        return f"{no_tokenizer_in(asset_location)}; AutoTokenizer will not load {out}"
    named = (
        f"; the run named tokenizer_model {derived.tokenizer_model!r} (not read): copy its"
        f" tokenizer files into {out}"
        if derived.tokenizer_model
        else ""
    )
    return (
        f"no tokenizer written: the checkpoint holds no tokenizer files{named};"
        f" AutoTokenizer will not load {out} until then"
    )


def refuse_config_against_record(
    source: ExportSource,
    paths: layout.CheckpointPaths | None,
    asset_location: str,
    assets: dict[str, Callable[[], bytes]],
    hf_config: str | os.PathLike | None,
) -> None:
    """A config.json (--hf-config's, or the checkpoint's own HF dir's) that contradicts the
    model the checkpoint records is refused before anything is written (record_agreement):
    exit 2 for --hf-config, exit 1 for the checkpoint's own files; so is one that is no
    config (not JSON, nested 5000 deep, no model_type, NaN), in one line naming it."""
    config_file = config_json_location(asset_location)
    error = ExportUsageError if hf_config is not None else CheckpointFormatError
    data = parse_config_json(assets["config.json"](), config_file, error)
    named = f"--hf-config {config_file}" if hf_config is not None else str(config_file)
    refuse_uncomputable(data, paths, source.reader, named)
    found = contradiction(data, paths, source.reader)
    if found is None:
        return
    if hf_config is not None:
        left_out = (
            ", or leave --hf-config out to use the model the checkpoint records"
            if _records_its_model(source, paths)
            else ""
        )
        raise ExportUsageError(
            f"--hf-config {config_file}: {found}; pass the model dir the run started from{left_out}"
        )
    raise CheckpointFormatError(
        f"{config_file}: {found}; pass --hf-config with the model dir the run started from"
    )


def _records_its_model(source: ExportSource, paths: layout.CheckpointPaths | None) -> bool:
    """Whether the checkpoint's own record of its model can be read: a config.json beside
    its weights, or a Megatron record a config derives from. `contradiction` also compares
    a record that derives none (sizes or family missing) on the numbers it holds, and
    without --hf-config such a checkpoint has no config to export with."""
    if paths is not None and paths.hf_dir is not None and (paths.hf_dir / "config.json").is_file():
        return True
    try:
        return recorded_config(paths, source.reader) is not None
    except (
        MegatronSettingsMissing,
        MegatronConfigError,
        CheckpointFormatError,
        CheckpointFileError,
    ):
        return False


def _refuse_unloadable_config(
    prepared: PreparedSource, hf_config: str | os.PathLike | None
) -> None:
    """--verify promises that transformers loads the export: a config.json its config class
    refuses (`rms_norm_eps: "1e-6"`), or a generation_config.json its GenerationConfig
    refuses (`max_new_tokens: -5`), is refused before anything is written, naming the key:
    exit 2 for --hf-config's, exit 1 for the checkpoint's own (or the one its record
    implies). Its dtype is left out: the export writes the dtype it wrote there."""
    where = config_json_location(prepared.asset_location)
    error = ExportUsageError if hf_config is not None else CheckpointFormatError
    data = parse_config_json(prepared.assets["config.json"](), where, error)
    written = {key: value for key, value in data.items() if key not in ("dtype", "torch_dtype")}
    refuse_unloadable(written, where, error)
    generation = prepared.assets.get(GENERATION_CONFIG_FILE)
    if generation is not None:
        named = join_location(prepared.asset_location, GENERATION_CONFIG_FILE)
        check_generation_config(named, generation(), error)


@dataclass
class PreparedSource:
    """A checkpoint to export and the Hugging Face files that describe it, all checked
    before the output is claimed."""

    source: ExportSource
    local_paths: layout.CheckpointPaths | None
    asset_location: str
    derived: DerivedConfig | None
    assets: AssetFiles


def prepare_source(
    ckpt: str | os.PathLike,
    out: Path,
    hf_config: str | os.PathLike | None,
    io: str,
    role: str | None,
    source: ExportSource | None = None,
) -> PreparedSource:
    """Resolve `ckpt`, refuse an --out that would touch what is read, find config.json
    (--hf-config, the checkpoint's own HF dir, or derived from its Megatron record) and run
    validate's cheap checks (`source`: `ckpt` already resolved). ExportUsageError when no
    config can be found."""
    source = source if source is not None else resolve_source(str(ckpt), io, role)
    check_out_dir(out, source.protected, model_dirs_of(hf_config))
    local_paths = (
        None if is_url(str(ckpt)) else checkpoint_resolution.resolve_checkpoint(ckpt, role=role)
    )
    asset_location = str(hf_config) if hf_config is not None else source.hf_assets
    derived: DerivedConfig | None = None
    if asset_location is None:
        derived = _derived_config(source, local_paths)
        asset_location = derived.source if derived is not None else None
    if asset_location is None:
        raise ExportUsageError(_no_config_message(source))
    if hf_config is not None and not Path(hf_config).exists():
        raise ExportUsageError(missing_hf_config(hf_config))
    if hf_config is not None and weights_file_problem(hf_config):
        raise ExportUsageError(f"--hf-config {weights_file_problem(hf_config)}")
    asset_root = local_paths.root if local_paths is not None and hf_config is None else None
    if derived is not None:
        assets = _derived_assets(derived, local_paths, io)
    else:
        skip = source.hf_skip if hf_config is None else ()
        assets = asset_files(asset_location, io, asset_root, skip, whole=hf_config is None)
    if "config.json" not in assets:
        raise no_config_json(asset_location, hf_config, local_paths)
    if derived is None:
        refuse_config_against_record(source, local_paths, asset_location, assets, hf_config)
    if local_paths is not None:
        # damaged or hostile: refused with validate's first error, before planning
        require_valid(local_paths, manifest_only=True, reader=source.reader)
    return PreparedSource(source, local_paths, asset_location, derived, assets)


def refuse_hf_config_of_no_kind(hf_config: str | os.PathLike) -> None:
    """ExportUsageError (exit 2) for an --hf-config that is there but neither a model dir
    nor a regular file (a FIFO, /dev/zero, a link to one), said as `validate --hf-config`
    says it. Taken for a model dir to list, it was "cannot list (Not a directory)", which
    named no option and called a FIFO a directory that could not be read; checked before
    any export path (full, LoRA merge, adapter) reads it."""
    try:
        os.stat(hf_config)
    except FileNotFoundError:  # missing, or a link to nothing: said (with the path's
        return  # directory) where the export reads it
    except OSError:
        pass  # a link loop and the like: `regular_file` names it
    if os.path.isdir(hf_config):
        return
    try:
        safe_files.regular_file(hf_config)
    except CheckpointFileError as err:
        raise ExportUsageError(f"--hf-config {err}") from None


DEFAULT_MAX_SHARD_SIZE = 5 * 10**9  # transformers' save_pretrained default
DEFAULT_WORKERS = 4


@dataclass(frozen=True)
class ExportOptions:
    """What `export_hf` was asked for beyond the checkpoint and --out, handed whole to
    each step (and to the LoRA exports, `lora_export.export_lora_kind`), so a step names
    the options it reads rather than a dozen parameters of their own.

    `max_shard_size` and `workers` stay None unless given, so that an export with no use
    for one refuses it instead of ignoring it; `shard_size` and `threads` are what an
    export that takes them uses."""

    dtype: str
    max_shard_size: int | None
    hf_config: str | os.PathLike | None
    layout_name: str
    workers: int | None
    verify: bool
    overwrite: bool
    io: str
    buffer_bytes: int
    progress: Progress | None
    role: str | None
    allow_nonfinite: bool
    adapter_only: bool
    base_progress: ByteProgress | None
    lora_alpha: float | None
    drop_mtp: bool
    verify_progress: Progress | None

    @property
    def shard_size(self) -> int:
        return DEFAULT_MAX_SHARD_SIZE if self.max_shard_size is None else self.max_shard_size

    @property
    def threads(self) -> int:
        return DEFAULT_WORKERS if self.workers is None else self.workers


@reads_checkpoint  # a step a run's keep_last removes meanwhile is said to be so
def export_hf(
    ckpt: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    dtype: str = "auto",
    max_shard_size: int | None = None,
    hf_config: str | os.PathLike | None = None,
    layout_name: str = "auto",
    workers: int | None = None,
    verify: bool = False,
    overwrite: bool = False,
    io: str = "auto",
    buffer_bytes: int = MIN_BUFFER_BYTES,
    progress: Progress | None = None,
    role: str | None = None,
    allow_nonfinite: bool = False,
    adapter_only: bool = False,
    base_progress: ByteProgress | None = None,
    lora_alpha: float | None = None,
    drop_mtp: bool = False,
    verify_progress: Progress | None = None,
) -> ExportResult:
    """Convert `ckpt` (any level of any layout `resolve_checkpoint` reads, or a URL)
    into `out_dir`; `role` picks verl's actor (default) or critic (refused: not an LM).

    A LoRA checkpoint is merged onto its base model, or with `adapter_only` written as a
    PEFT adapter dir (`mfsdp_ckpt.convert.lora_export`); merging first hashes the whole base
    model, reported to `base_progress` as (bytes hashed, bytes to hash). A Megatron LoRA
    adapter saved beside its base weights is merged into them (`megatron_lora`), its alpha
    read from the checkpoint's record or `lora_alpha`; with `adapter_only` it is written as
    a PEFT adapter dir (`megatron_lora_export`).

    Multi-token prediction layers (Megatron's `mtp.`) are refused, or with `drop_mtp` left
    out unread (`mtp`); adapters on them go with them.

    `max_shard_size` (None: DEFAULT_MAX_SHARD_SIZE) and `workers` (None: DEFAULT_WORKERS)
    are None unless given, so that an export with no use for one refuses it
    (`lora_export._refuse_flags_not_taken`) instead of ignoring it.

    `progress` gets (tensors, total tensors, bytes, total bytes) as they are written, and
    `verify_progress` the same as `verify` compares them (`export_verify`).

    Raises ExportUsageError / CheckpointPathError / OutputDirError (bad usage), ExportError
    (NonFiniteError: a weight holds NaN/Inf, unless `allow_nonfinite`), OutputBusyError
    (another run is writing `out_dir`), CheckpointFormatError / CheckpointFileError /
    UnsafeMetadataError (bad checkpoint), OSError (disk full, unwritable). On any failure
    nothing is left at `out_dir`, and `overwrite` replaces only an empty directory or an
    earlier export (`out_dir.py`).
    """
    from mfsdp_ckpt.convert.lora_export import (  # they build on this module
        export_lora_kind,
        merge_adapter_saved_alone,
    )

    if hf_config is not None:
        refuse_hf_config_of_no_kind(hf_config)
    options = ExportOptions(
        dtype=dtype,
        max_shard_size=max_shard_size,
        hf_config=hf_config,
        layout_name=layout_name,
        workers=workers,
        verify=verify,
        overwrite=overwrite,
        io=io,
        buffer_bytes=buffer_bytes,
        progress=progress,
        role=role,
        allow_nonfinite=allow_nonfinite,
        adapter_only=adapter_only,
        base_progress=base_progress,
        lora_alpha=lora_alpha,
        drop_mtp=drop_mtp,
        verify_progress=verify_progress,
    )
    exported = export_lora_kind(ckpt, out_dir, options)
    if exported is not None:
        return exported
    started = time.monotonic()
    out = Path(out_dir)
    prepared = prepare_source(ckpt, out, hf_config, io, role)
    if verify:
        _refuse_unloadable_config(prepared, hf_config)
    merged = merge_adapter_saved_alone(prepared, out, options)
    if merged is not None:
        return merged
    with claim_output(out, overwrite, top_level_names(prepared.assets)) as claim:
        written = _write_planned(prepared, claim.tmp, options)
        mismatches, verify_seconds = _verify_written(written, claim.tmp, prepared, options)
        claim.publish()
    result = ExportResult(
        out_dir=str(out),
        layout=written.plan.layout,
        model_type=written.plan.model_type,
        dtype=written.plan.dtype.name,
        tensors=len(written.writer.slots),
        bytes=written.writer.total_bytes,
        files=sorted(written.writer.files),
        seconds=time.monotonic() - started,
        mismatches=mismatches,
        notes=_export_notes(prepared, written, hf_config, out),
        convert_seconds=written.convert_seconds,
        verify_seconds=verify_seconds,
    )
    result.left_out(written.plan.mtp)
    return result


@dataclass
class _Written:
    """An export's tensors, written and closed in the work dir, with what its result and
    notes are made of."""

    plan: ExportPlan
    writer: ShardedSafetensorsWriter
    vocab_notes: list[str]
    convert_seconds: float


def _write_planned(prepared: PreparedSource, tmp: Path, options: ExportOptions) -> _Written:
    """Write the assets, plan the tensors against the config.json now in `tmp` and write
    them. The config is read from `tmp` because `fit_config_file` may have fitted its vocab
    to the checkpoint's; the written config names the dtype the plan chose. A failure
    closes the writer's files (the claim removes `tmp`)."""
    write_assets(prepared.assets, tmp)
    vocab_notes = fit_config_file(
        prepared.source.paths, prepared.source.reader, tmp, prepared.asset_location
    )
    plan = _plan(prepared, tmp, options)
    writer = ShardedSafetensorsWriter(tmp, plan.specs(), options.shard_size)
    try:
        writer.open()
        converting = time.monotonic()
        _write_tensors(plan, writer, options)
        writer.close()
        convert_seconds = time.monotonic() - converting
    except BaseException:
        writer.abort()
        raise
    set_config_dtype(tmp / "config.json", plan.dtype)
    for name in prepared.assets:
        step_saving.fsync_path(tmp / name)
    return _Written(plan, writer, vocab_notes, convert_seconds)


def _plan(prepared: PreparedSource, tmp: Path, options: ExportOptions) -> ExportPlan:
    """The export's plan, with a merged LoRA's scale set (its alpha recorded or given, never
    guessed), checked to be backed by the checkpoint's bytes before the writer checks there
    is room for them. --lora-alpha with no adapter to merge is refused (exit 2)."""
    source = prepared.source
    config = load_copied_config(tmp / "config.json", prepared.asset_location, _layer_cap(source))
    plan = plan_export(
        source,
        config,
        layout_name=options.layout_name,
        dtype=options.dtype,
        drop_mtp=options.drop_mtp,
        hf_config=options.hf_config,
    )
    plan.allow_nonfinite = options.allow_nonfinite
    if plan.lora is None and options.lora_alpha is not None:
        raise ExportUsageError(
            f"--lora-alpha: {source.location} holds no LoRA adapter to merge; leave"
            " --lora-alpha out"
        )
    if plan.lora is not None:
        set_lora_scale(plan.lora, source.location, prepared.local_paths, options.lora_alpha)
    _check_backed(plan)
    return plan


def _write_tensors(
    plan: ExportPlan, writer: ShardedSafetensorsWriter, options: ExportOptions
) -> None:
    """Every planned tensor into the open `writer`, on `options.threads` threads: one that
    keeps its name and dtype streams file to file through per-thread buffers (costing the
    byte budget nothing); any other is converted whole under the budget, refused if it
    holds NaN/Inf unless allowed."""
    streamable = {item.source for item in plan.items if is_streamable(plan, item)}
    buffers = PieceBuffers()

    def work(item: MappedTensor) -> int:
        if item.source in streamable and stream_tensor(plan, item, writer, buffers):
            return writer.slots[item.targets[0]].nbytes
        written = 0
        where = f"{plan.source.location} [{item.source}]"
        with tensor_memory(where, plan.entry(item).nbytes, "converting it"):
            for name, tensor in convert(plan, item):
                nonfinite = 0 if plan.allow_nonfinite else count_nonfinite_tensor(tensor)
                if nonfinite:
                    raise nonfinite_error(plan, item, nonfinite, overflow=None)
                writer.write(name, tensor)
                written += tensor.nbytes
        return written

    def cost(plan: ExportPlan, item: MappedTensor) -> int:
        return 0 if item.source in streamable else task_cost(plan, item)

    threads, budget = options.threads, options.buffer_bytes
    run_tasks(plan, work, threads, budget, options.progress, writer.total_bytes, cost)


def _verify_written(
    written: _Written, tmp: Path, prepared: PreparedSource, options: ExportOptions
) -> tuple[list[str] | None, float | None]:
    """--verify: the export read back and compared with the checkpoint, and the
    checkpoint's files hashed against its manifest (bytes flipped after save match their
    own reads, so only the hashes catch them). Returns the mismatches and the seconds it
    took, (None, None) when not asked to verify (so the summary does not say verified);
    ExportVerifyError on any mismatch, before the export is published."""
    if not options.verify:
        return None, None
    verifying = time.monotonic()
    mismatches = verify_export(
        written.plan,
        tmp,
        workers=options.threads,
        buffer_bytes=options.buffer_bytes,
        progress=options.verify_progress,
    )
    if prepared.local_paths is not None:
        mismatches = (
            manifest_hash_errors(prepared.local_paths, workers=options.threads) + mismatches
        )
    if mismatches:
        raise ExportVerifyError(mismatches)
    return mismatches, time.monotonic() - verifying


def _export_notes(
    prepared: PreparedSource, written: _Written, hf_config: str | os.PathLike | None, out: Path
) -> list[str]:
    """What the user should know about an export that succeeded: where its config came
    from and what was fitted, left out, cast or merged, and a missing tokenizer (without
    one AutoTokenizer will not load the export)."""
    local_paths, derived, plan = prepared.local_paths, prepared.derived, written.plan
    notes = [local_paths.note] if local_paths is not None and local_paths.note else []
    notes += _config_notes(prepared.source, local_paths, derived, hf_config)
    notes += written.vocab_notes
    notes += prepared.assets.left_out_note(prepared.asset_location)
    notes += plan.dropped_padding_notes()
    notes += plan.cast_notes()
    notes += plan.lora.notes if plan.lora is not None else []
    if not any(name.startswith("tokenizer") for name in prepared.assets):
        notes.append(_no_tokenizer_note(prepared.asset_location, derived, out))
    return notes
