"""Writing a LoRA adapter as a PEFT adapter dir.

`adapter_config.json` + `adapter_model.safetensors`, which
`peft.PeftModel.from_pretrained(base, DIR)` loads; it needs no base at all, so it lives
apart from the merge (`lora_merge`). `write_peft_files` writes the two files for both
adapter exports (an mfsdp LoRA step's here, a Megatron one's in `megatron_lora_export`),
which differ only in where each tensor and the config come from.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from mfsdp_ckpt.convert.export_plan import choose_dtype
from mfsdp_ckpt.convert.export_result import ExportResult
from mfsdp_ckpt.convert.export_scheduler import Progress
from mfsdp_ckpt.convert.hf_config import HFConfigError, read_config_json
from mfsdp_ckpt.convert.lora_adapter import StoredAdapter
from mfsdp_ckpt.convert.peft_base import peft_base
from mfsdp_ckpt.convert.tensor_writes import compare_written, finite_only, write_all
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.format.manifest import Manifest
from mfsdp_ckpt.format.model_files import ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE
from mfsdp_ckpt.lora import BaseModelRecord, peft_name, peft_target_modules
from mfsdp_ckpt.storage.named_writes import write_text
from mfsdp_ckpt.storage.safetensors_writer import SINGLE_FILE, ShardedSafetensorsWriter, Spec

if TYPE_CHECKING:
    import torch


ADAPTER_LAYOUT = "peft adapter"


def write_peft_adapter(
    adapter: StoredAdapter,
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
    picked some layers recorded their own names, q_proj, ..., which adapt every layer),
    and its base as PEFT loads one (`peft_base`: a checkpoint base is no model dir, and a
    model dir whose config the run changed is not the model trained)."""
    stored = adapter.reader.tensors
    out_dtype = {key: choose_dtype(dtype, None, [stored[key]]) for _, key in adapter.keys()}
    targets = {peft_name(parsed): key for parsed, key in adapter.keys()}
    specs: list[Spec] = [(name, out_dtype[key], stored[key].shape) for name, key in targets.items()]

    def tensor(name: str) -> torch.Tensor:
        key = targets[name]
        return adapter.reader.read_tensor(key).to(out_dtype[key].torch)

    base_name, note = peft_base(base, paths)

    def settings() -> dict:
        assert manifest.lora is not None  # lora_manifest() returns only manifests with one
        return dict(
            manifest.lora,
            base_model_name_or_path=base_name,
            target_modules=peft_target_modules(adapter.modules, _layer_count(paths)),
        )

    return write_peft_files(
        tmp,
        specs,
        tensor,
        lambda name: f"{paths.dist_ckpt} [{targets[name]}]",
        settings,
        manifest.model_family or "",
        verify=verify,
        progress=progress,
        allow_nonfinite=allow_nonfinite,
        notes=[note] if note is not None else [],
    )


def write_peft_files(
    tmp: Path,
    specs: list[Spec],
    tensor: Callable[[str], torch.Tensor],
    where: Callable[[str], str],
    settings: Callable[[], dict],
    model_type: str,
    *,
    verify: bool,
    progress: Progress | None,
    allow_nonfinite: bool,
    notes: Sequence[str] = (),
) -> ExportResult:
    """adapter_model.safetensors holding each tensor of `specs` as `tensor(name)` gives it,
    in one file (the one file PEFT and vLLM load), refused where it holds NaN/Inf unless
    `allow_nonfinite` (`finite_only`, naming `where(name)`); then `settings()` as
    adapter_config.json, and with `verify` each tensor read back and compared."""
    names = [name for name, _, _ in specs]
    writer = ShardedSafetensorsWriter(tmp, specs, max_shard_bytes=sys.maxsize)  # PEFT: one file
    converting = time.monotonic()
    write_all(writer, names, finite_only(tensor, where, allow_nonfinite), progress)
    convert_seconds = time.monotonic() - converting
    os.replace(tmp / SINGLE_FILE, tmp / ADAPTER_WEIGHTS_FILE)
    config = json.dumps(settings(), indent=2, sort_keys=True) + "\n"
    write_text(tmp / ADAPTER_CONFIG_FILE, config)
    mismatches, verify_seconds = None, None
    if verify:
        verifying = time.monotonic()
        mismatches = compare_written(tmp / ADAPTER_WEIGHTS_FILE, names, tensor)
        verify_seconds = time.monotonic() - verifying
    return ExportResult(
        "",
        ADAPTER_LAYOUT,
        model_type,
        ",".join(sorted({dtype.name for _, dtype, _ in specs})),
        len(specs),
        writer.total_bytes,
        [ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE],
        0.0,
        mismatches,
        list(notes),
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
