"""Which LoRA export a checkpoint gets, and the flags that export has no use for.

`export_hf` asks here first: an mfsdp LoRA checkpoint is merged or written as a PEFT
adapter (`lora_export`), a Megatron or PEFT adapter saved alone goes to
`megatron_lora_export`. Each refuses (exit 2) a flag it would otherwise ignore without a
word, so the routing and the refusals live together.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from mfsdp_ckpt.convert.export_errors import ExportUsageError
from mfsdp_ckpt.convert.export_options import ExportOptions
from mfsdp_ckpt.convert.export_prepare import PreparedSource
from mfsdp_ckpt.convert.export_result import ExportResult
from mfsdp_ckpt.convert.lora_checkpoint import lora_manifest
from mfsdp_ckpt.convert.lora_export import export_lora
from mfsdp_ckpt.convert.megatron_lora_export import (
    adapter_only_checkpoint,
    export_megatron_adapter,
    merge_onto_base,
)

if TYPE_CHECKING:
    pass


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
    local and named as Hugging Face names it (`--layout hf`, `--io local` are what it does);
    its adapter alone is written from its manifest's record, with no model config (a
    --hf-config there was passed over without a word, even one that does not exist)."""
    lora = f"{ckpt} is an mfsdp LoRA checkpoint"
    layout_name, io = options.layout_name, options.io
    return {
        f"--hf-config {options.hf_config}": (
            f"{lora}: --adapter-only writes its adapter as its manifest records it, with no"
            " model config or weights"
            if options.adapter_only and options.hf_config is not None
            else None
        ),
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
