"""Merging a LoRA adapter into its base model, streamed one tensor at a time.

The base's safetensors (the files transformers loads, as training did) are read one
tensor at a time, `scale * B @ A` (in fp32) is added to each adapted weight, and the
result is cast to the export dtype and written: peak memory is one base tensor plus its
delta. The base is hashed first and must match the manifest: merging onto another base
would silently produce a different model. Shared by the mfsdp and the Megatron LoRA
merges (`write_merged`), so both report the same notes in the same order.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from mfsdp_ckpt.convert.export_errors import ExportError
from mfsdp_ckpt.convert.export_plan import choose_dtype
from mfsdp_ckpt.convert.export_result import ExportResult
from mfsdp_ckpt.convert.export_scheduler import Progress
from mfsdp_ckpt.convert.export_source import (
    AssetFiles,
    JsonConfig,
    load_copied_config,
    no_tokenizer_in,
)
from mfsdp_ckpt.convert.export_write import set_config_dtype, write_assets
from mfsdp_ckpt.convert.lora_adapter import StoredAdapter
from mfsdp_ckpt.convert.tensor_writes import compare_written, finite_only, write_all
from mfsdp_ckpt.format.lora_fields import base_weights_dir
from mfsdp_ckpt.format.model_files import HF_CONFIG_FILE
from mfsdp_ckpt.lora import BaseModelRecord, ByteProgress, base_model_problems
from mfsdp_ckpt.storage.safetensors_source import SafetensorsSource
from mfsdp_ckpt.storage.safetensors_writer import ShardedSafetensorsWriter, Spec

if TYPE_CHECKING:
    import torch
    from transformers import PretrainedConfig


MERGED_LAYOUT = "hf (LoRA merged)"


def _base_source(base: BaseModelRecord | None, progress: ByteProgress | None) -> SafetensorsSource:
    """The base's safetensors weights as training loaded them (`SafetensorsSource` picks the
    files transformers does: a stray model_old.safetensors or Mistral's consolidated file
    beside them is not read), after checking that the base on disk is, byte for byte, the
    one the adapter was trained on (hashing all of it, reported to `progress`). Its files
    may lead anywhere, as in training: the base is the run's own model dir."""
    weights = base_weights_dir(base)
    if weights is None:
        raise ExportError(
            "the base model was a random init: there is nothing to merge onto "
            "(export the adapter with --adapter-only)"
        )
    assert base is not None  # a dir is named by a record only
    errors, notes = base_model_problems(base, deep=True, progress=progress)
    if errors or notes:
        where, what = errors[0] if errors else (weights, notes[0])
        raise ExportError(
            f"{where}: {what}; a merged export needs that exact base (--hf-config DIR names"
            " where it is now), or use --adapter-only"
        )
    return SafetensorsSource(weights, links_anywhere=True)


def write_merged_lora(
    adapter: StoredAdapter,
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
    config = load_copied_config(tmp / HF_CONFIG_FILE, asset_location)
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
    set_config_dtype(tmp / HF_CONFIG_FILE, out_dtype)
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


def _check_fits_base(adapter: StoredAdapter, source: SafetensorsSource) -> dict[str, str]:
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
