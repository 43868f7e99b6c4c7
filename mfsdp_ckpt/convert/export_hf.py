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
`export_options` (what was asked), `export_prepare` (--out, the checkpoint and its
config.json, checked before the output is claimed), `export_source` (the checkpoint, its
HF assets and config), `export_plan` (names, shapes, dtypes), `export_write` (assets and
tensors into the work dir), `export_scheduler` (threads under the byte budget),
`export_stream` (kernel copy and piecewise cast), `export_verify` (--verify),
`export_result`, `export_errors`. A LoRA checkpoint is routed to its own export first
(`lora_export_kind`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import NamedTuple

from mfsdp_ckpt.check.removed_while_read import reads_checkpoint
from mfsdp_ckpt.check.validate import manifest_hash_errors
from mfsdp_ckpt.convert.export_errors import ExportUsageError, ExportVerifyError
from mfsdp_ckpt.convert.export_options import ExportOptions
from mfsdp_ckpt.convert.export_options import parse_size as parse_size  # cli/export_hf.py's
from mfsdp_ckpt.convert.export_prepare import (
    PreparedSource,
    prepare_source,
    refuse_hf_config_of_no_kind,
)
from mfsdp_ckpt.convert.export_result import ExportResult
from mfsdp_ckpt.convert.export_scheduler import MIN_BUFFER_BYTES, Progress
from mfsdp_ckpt.convert.export_source import (
    ExportSource,
    check_generation_config,
    holds_tokenizer,
    no_tokenizer_in,
)
from mfsdp_ckpt.convert.export_verify import verify_export
from mfsdp_ckpt.convert.export_write import WrittenExport, write_planned
from mfsdp_ckpt.convert.hf_config import parse_config_json, refuse_unloadable
from mfsdp_ckpt.convert.lora_export_kind import export_lora_kind, merge_adapter_saved_alone
from mfsdp_ckpt.convert.megatron_config import DerivedConfig
from mfsdp_ckpt.convert.megatron_record import has_recorded_config
from mfsdp_ckpt.convert.record_agreement import unchecked_note
from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.format.file_hash import ByteProgress
from mfsdp_ckpt.format.generation_config import GENERATION_CONFIG_FILE
from mfsdp_ckpt.format.model_files import HF_CONFIG_FILE, top_level_names
from mfsdp_ckpt.storage.out_dir import claim_output
from mfsdp_ckpt.storage.tensorstore_store import join_location


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
    unchecked = unchecked_note(paths, source.reader, hf_config is not None)
    if unchecked is not None:
        used = f"--hf-config {hf_config}" if hf_config is not None else "its config.json"
        notes.append(f"{used}: {unchecked}")
    return notes


class UnreadTokenizer(NamedTuple):
    """A tokenizer dir in a checkpoint whose layout does not read one there, and the words
    every message about the missing tokenizer says of it."""

    directory: Path
    said: str


def unread_tokenizer(paths: layout.CheckpointPaths | None) -> UnreadTokenizer | None:
    """What lies at `iter_N/tokenizer/` of a checkpoint whose layout reads no tokenizer
    there (Megatron-LM's: Megatron-Bridge's is the layout that keeps one there,
    `CheckpointPaths.tokenizer_dir`); None where nothing does. Not read, since nothing says
    it is the run's; but a message must not say the checkpoint holds none when a user
    copied one in: it names the dir, to be given as the tokenizer."""
    if paths is None or paths.step_dir is None or paths.tokenizer_dir is not None:
        return None
    found = paths.step_dir / layout.BRIDGE_TOKENIZER_DIR
    if not os.path.lexists(found):
        return None
    return UnreadTokenizer(
        found,
        f"{found} is not read for a {paths.kind} checkpoint (only Megatron-Bridge's layout"
        " keeps its tokenizer there)",
    )


def _no_tokenizer_note(
    asset_location: str,
    derived: DerivedConfig | None,
    out: Path,
    paths: layout.CheckpointPaths | None,
) -> str:
    if derived is None:
        return f"{no_tokenizer_in(asset_location)}; AutoTokenizer will not load {out}"
    run_named = derived.tokenizer_model
    unread = unread_tokenizer(paths)
    if unread is not None:
        named = f" (the run named tokenizer_model {run_named!r})" if run_named else ""
        return (
            f"no tokenizer written: {unread.said}; copy its files into {out} if they are the"
            f" run's tokenizer{named}, or AutoTokenizer will not load {out}"
        )
    named = (
        f"; the run named tokenizer_model {run_named!r} (not read): copy its"
        f" tokenizer files into {out}"
        if run_named
        else ""
    )
    return (
        f"no tokenizer written: the checkpoint holds no tokenizer files{named};"
        f" AutoTokenizer will not load {out} until then"
    )


def _refuse_unloadable_config(
    prepared: PreparedSource, hf_config: str | os.PathLike | None, out: Path, overwrite: bool
) -> None:
    """--verify promises that transformers loads the export: a config.json its config class
    refuses (`rms_norm_eps: "1e-6"`), or a generation_config.json its GenerationConfig
    refuses (`max_new_tokens: -5`), is refused before anything is written, naming the key:
    exit 2 for --hf-config's, exit 1 for the checkpoint's own (or the one its record
    implies). Its dtype is left out: the export writes the dtype it wrote there.

    Checked holding the claim on `out` (released again: the export, or the adapter merge,
    claims it for its writing), so that an --out this export may not write (there without
    --overwrite, someone's data, a mount point) is refused first, by the words it has
    without --verify, and not after seconds of importing transformers, nor hidden behind
    a config error."""
    with claim_output(out, overwrite, top_level_names(prepared.assets)):
        where = prepared.config_json
        error = ExportUsageError if hf_config is not None else CheckpointFormatError
        data = parse_config_json(prepared.assets[HF_CONFIG_FILE](), where, error)
        written = {key: value for key, value in data.items() if key not in ("dtype", "torch_dtype")}
        refuse_unloadable(written, where, error)
        generation = prepared.assets.get(GENERATION_CONFIG_FILE)
        if generation is not None:
            named = join_location(prepared.asset_location, GENERATION_CONFIG_FILE)
            check_generation_config(named, generation(), error)


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
    (`lora_export_kind._refuse_flags_not_taken`) instead of ignoring it.

    `progress` gets (tensors, total tensors, bytes, total bytes) as they are written, the
    bytes a window at a time within a tensor (`WriteTally`), and `verify_progress` the same
    as `verify` compares them (`export_verify`).

    Raises ExportUsageError / CheckpointPathError / OutputDirError (bad usage), ExportError
    (NonFiniteError: a weight holds NaN/Inf, unless `allow_nonfinite`), OutputBusyError
    (another run is writing `out_dir`), CheckpointFormatError / CheckpointFileError /
    UnsafeMetadataError (bad checkpoint), OSError (disk full, unwritable). On any failure
    nothing is left at `out_dir`, and `overwrite` replaces only an empty directory or an
    earlier export (`out_dir.py`).
    """
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
        _refuse_unloadable_config(prepared, hf_config, out, overwrite)
    merged = merge_adapter_saved_alone(prepared, out, options)
    if merged is not None:
        return merged.read_from(
            prepared.source.location, prepared.local_paths, prepared.source.reader
        )
    with claim_output(out, overwrite, top_level_names(prepared.assets)) as claim:
        written = write_planned(prepared, claim.tmp, options)
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
    return result.read_from(prepared.source.location, prepared.local_paths, prepared.source.reader)


def _verify_written(
    written: WrittenExport, tmp: Path, prepared: PreparedSource, options: ExportOptions
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
    prepared: PreparedSource, written: WrittenExport, hf_config: str | os.PathLike | None, out: Path
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
    notes += plan.buffer_notes()
    notes += plan.optimizer_notes()
    notes += plan.cast_notes()
    notes += plan.lora.notes if plan.lora is not None else []
    if prepared.tokenizer_note is not None:
        notes.append(prepared.tokenizer_note)
    if not holds_tokenizer(prepared.assets):
        notes.append(_no_tokenizer_note(prepared.asset_location, derived, out, local_paths))
    return notes
