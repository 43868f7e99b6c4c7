"""Merging a LoRA adapter into its base model, streamed one tensor at a time.

The base (a model dir's safetensors, or the checkpoint the run started from, read as
training read it: `lora_base`) is read one tensor at a time, `scale * B @ A` (in fp32) is
added to each adapted weight, and the result is cast to the export dtype and written: peak
memory is one base tensor plus its delta. The base is hashed first and must match the
manifest: merging onto another base would silently produce a different model. Only the
tensors of the model the config describes are written, as training loaded only those (a
base of more layers under `model.overrides={num_hidden_layers: N}`). Shared by the mfsdp
and the Megatron LoRA merges (`write_merged`), so both report the same notes in the same
order.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from mfsdp_ckpt.check.printable import first_of
from mfsdp_ckpt.convert.export_errors import ExportError
from mfsdp_ckpt.convert.export_plan import choose_dtype
from mfsdp_ckpt.convert.export_result import ExportResult
from mfsdp_ckpt.convert.export_scheduler import Progress
from mfsdp_ckpt.convert.export_source import (
    AssetFiles,
    JsonConfig,
    expected_weights_of,
    load_copied_config,
    no_tokenizer_in,
)
from mfsdp_ckpt.convert.export_write import set_config_dtype, write_assets
from mfsdp_ckpt.convert.hf_config import weights_disagreement
from mfsdp_ckpt.convert.lora_adapter import StoredAdapter
from mfsdp_ckpt.convert.lora_base import BaseTensor, CheckpointBase, open_base
from mfsdp_ckpt.convert.tensor_writes import compare_written, finite_only, write_all
from mfsdp_ckpt.convert.weight_dtype import refuse_non_float
from mfsdp_ckpt.format.model_files import HF_CONFIG_FILE
from mfsdp_ckpt.format.run_steps import natural_order
from mfsdp_ckpt.lora import BaseModelRecord, ByteProgress
from mfsdp_ckpt.storage.safetensors_source import SafetensorsSource, StoredTensor
from mfsdp_ckpt.storage.safetensors_writer import ShardedSafetensorsWriter, Spec

if TYPE_CHECKING:
    import torch
    from transformers import PretrainedConfig


MERGED_LAYOUT = "hf (LoRA merged)"


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
    tensor of the config's model (adapted ones merged) in the export dtype (`auto`: the
    config's)."""
    write_assets(assets, tmp)
    config = load_copied_config(tmp / HF_CONFIG_FILE, asset_location)
    source = open_base(base, config, base_progress)
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
    source: SafetensorsSource | CheckpointBase,
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
    """Every tensor of the base model `source` that the config's model has
    (`_config_tensors`; those in `deltas` plus their fp32 delta) in the export dtype
    (`auto`: the config's) into `tmp`, where the config and assets already are; one base
    tensor and its delta in memory at a time. One holding NaN/Inf is refused unless
    `allow_nonfinite` (`finite_only`). Its notes: a missing tokenizer, then `adapter_notes`
    (what reading the adapter found), then the base tensors and `assets` left out, so that
    each LoRA kind that merges reports the same things in the same order."""
    tensors, left_out = _config_tensors(config, source, deltas)
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
    notes += [*adapter_notes, *left_out, *assets.left_out_note(asset_location)]
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


def _config_tensors(
    config: JsonConfig | PretrainedConfig,
    source: SafetensorsSource | CheckpointBase,
    deltas: Mapping[str, Callable[[], torch.Tensor]],
) -> tuple[dict[str, StoredTensor | BaseTensor], list[str]]:
    """(the base tensors the config's model has, a note naming those left out). Training
    loaded the base into the model its config builds, which takes the weights it has and
    drops the others (a base of 2 layers under `model.overrides={num_hidden_layers: 1}`
    trained 1): a merge that wrote them all gave a config.json of 1 layer over tensors of
    2, which vLLM refuses. A base that lacks a weight of the config's model, or holds one
    of another shape or stored as no float (`refuse_non_float`), or an adapter on a weight
    the model lacks, is refused (ExportError): that is no model the run trained."""
    expected = expected_weights_of(config)
    shapes = {name: tuple(entry.shape) for name, entry in source.tensors.items()}
    problem = weights_disagreement(source.root, shapes, expected, unknown=False)
    if problem is not None:
        raise ExportError(problem)
    dropped: set[str] = {name for name in shapes if name not in expected.allowed}
    lost = sorted(name for name in deltas if name in dropped)
    if lost:
        raise ExportError(
            f"{source.root} [{lost[0]}]: the adapter adapts it, but the config's model"
            f" ({config.model_type}) has no such weight"
        )
    kept: dict[str, StoredTensor | BaseTensor] = {
        name: entry for name, entry in source.tensors.items() if name not in dropped
    }
    for name in sorted(set(expected.required).intersection(kept), key=natural_order):
        what = f"it is a floating-point weight of {config.model_type}"
        refuse_non_float(name, kept[name].dtype, what, source.root)
    if not dropped:
        return kept, []
    in_order = sorted(dropped, key=natural_order)
    note = (
        f"{len(dropped)} base tensor(s) the config's model ({config.model_type}) does not have"
        f" left out, as training left them out: {first_of(in_order, 3)}"
    )
    return kept, [note]


def _check_fits_base(
    adapter: StoredAdapter, source: SafetensorsSource | CheckpointBase
) -> dict[str, str]:
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
