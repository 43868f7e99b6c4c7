"""`export-hf --adapter-only` on a Megatron LoRA checkpoint: a Hugging Face PEFT adapter dir.

The Megatron adapter is written under the Hugging Face module names it stands for
(`megatron_lora`): linear_qkv's A becomes q_proj's, k_proj's and v_proj's lora_A, its B's
rows are split per query group as the fused weight's are; linear_fc1 likewise into
gate_proj / up_proj; linear_proj and linear_fc2 become o_proj and down_proj unchanged.
`peft.PeftModel.from_pretrained(base, DIR)` then computes exactly what the Megatron model
did (lora_alpha / r is the same alpha / dim). No base weights are read: a Megatron-Bridge
save holding the adapter alone exports too. The dir appears only when complete
(`claim_output`), as every export does.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from mfsdp_ckpt.convert.export_errors import ExportError, ExportUsageError
from mfsdp_ckpt.convert.export_plan import choose_dtype, live_peft_hint, plan_adapter
from mfsdp_ckpt.convert.export_prepare import PreparedSource, prepare_source
from mfsdp_ckpt.convert.export_result import ExportResult
from mfsdp_ckpt.convert.export_scheduler import Progress
from mfsdp_ckpt.convert.export_source import (
    ExportSource,
    JsonConfig,
    load_copied_config,
    refuse_family_without_table,
    resolve_source,
)
from mfsdp_ckpt.convert.export_verify import checking_crcs
from mfsdp_ckpt.convert.export_write import reading_checked, write_assets
from mfsdp_ckpt.convert.fused_tensors import Geometry
from mfsdp_ckpt.convert.lora_merge import write_merged
from mfsdp_ckpt.convert.mapping_errors import MappingError
from mfsdp_ckpt.convert.megatron_lora import (
    PEFT_KIND,
    MegatronLora,
    adapter_kind,
    holds_adapters,
)
from mfsdp_ckpt.convert.megatron_lora_alpha import set_lora_scale
from mfsdp_ckpt.convert.name_maps import model_tensors
from mfsdp_ckpt.convert.peft_adapter import write_peft_files
from mfsdp_ckpt.convert.tensor_writes import publish_verified
from mfsdp_ckpt.format.model_files import HF_CONFIG_FILE, top_level_names
from mfsdp_ckpt.format.state_keys import AmbiguousStateError
from mfsdp_ckpt.lora import AdapterKey, peft_name, peft_target_modules
from mfsdp_ckpt.storage.out_dir import claim_output
from mfsdp_ckpt.storage.safetensors_source import (
    SafetensorsSource,
    StoredTensor,
    other_weights_hint,
)
from mfsdp_ckpt.storage.safetensors_writer import Spec

if TYPE_CHECKING:
    import torch
    from transformers import PretrainedConfig

    from mfsdp_ckpt.storage.reader import CheckpointReader


def export_megatron_adapter(
    ckpt: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    dtype: str = "auto",
    hf_config: str | os.PathLike | None = None,
    verify: bool = False,
    overwrite: bool = False,
    io: str = "auto",
    role: str | None = None,
    lora_alpha: float | None = None,
    progress: Progress | None = None,
    drop_mtp: bool = False,
    allow_nonfinite: bool = False,
    refuse_flags: Callable[[], None] | None = None,
) -> ExportResult:
    """PEFT adapter dir from a checkpoint holding a Megatron LoRA adapter. ExportUsageError
    when it holds none (and no manifest of ours says LoRA), or its alpha is not recorded
    and `lora_alpha` is not given. Adapters on multi-token prediction layers are refused,
    or left out with `drop_mtp` (`export_plan.model_weights`). A tensor holding NaN/Inf is
    refused (NonFiniteError) unless `allow_nonfinite`, as for any export. `refuse_flags`
    refuses the caller's flags this export has no use for, once the checkpoint is known to
    hold an adapter: a checkpoint without one is said to be that first, not blamed on a flag.
    A config of a family with no mcore name table is refused from its model_type before
    transformers builds it (`refuse_family_without_table`), as the plain export does.
    Each adapter record read raw is checked against the CRC torch.save wrote for it as it
    is read (`reading_checked`); with `verify` and no manifest, every one (`checking_crcs`)."""
    started = time.monotonic()
    out = Path(out_dir)
    source = resolve_source(str(ckpt), io, role)
    try:
        names = model_tensors(source.reader.tensors)
    except AmbiguousStateError as err:  # two model entries: exit 2, naming the checkpoint
        raise AmbiguousStateError(f"{source.location}: {err}") from None
    except MappingError as err:  # ambiguous names, virtual-pipeline chunks
        raise ExportError(f"{source.location}: {err}") from None
    if not holds_adapters(names):  # a live PEFT model's state dict is named, as merging does
        raise ExportUsageError(
            f"{ckpt}: not a local LoRA checkpoint (its manifest records no adapter) nor a"
            " Megatron or PEFT LoRA one (no adapter tensors); --adapter-only needs one"
            f"{live_peft_hint(list(names))}"
        )
    if refuse_flags is not None:
        refuse_flags()
    prepared = prepare_source(ckpt, out, hf_config, io, role, source)
    with claim_output(out, overwrite) as claim:
        tmp = claim.tmp
        config_dir = tmp / ".config"  # read to split the fused adapters, not exported
        config_dir.mkdir()
        write_assets({HF_CONFIG_FILE: prepared.assets[HF_CONFIG_FILE]}, config_dir)
        refuse_family_without_table(source, config_dir / HF_CONFIG_FILE, "auto", hf_config)
        config = load_copied_config(config_dir / HF_CONFIG_FILE, prepared.asset_location)
        (config_dir / HF_CONFIG_FILE).unlink()
        config_dir.rmdir()
        lora, mtp, geometry = plan_adapter(source, config, drop_mtp)
        assert lora is not None  # holds_adapters said so, and plan_adapter refuses MTP-only
        set_lora_scale(lora, source.location, prepared.local_paths, lora_alpha)
        read = checking_crcs(source) if verify else reading_checked(source)
        result = _write_adapter(
            lora, read, config, geometry, tmp, dtype, verify, progress, allow_nonfinite
        )
        publish_verified(claim, result)
    result.left_out(mtp)
    return result.published(out, started)


def peft_config(lora: MegatronLora, num_layers: int) -> dict:
    """PEFT's LoraConfig as adapter_config.json: target_modules such that PEFT adds
    adapters exactly where the weights are (`peft_target_modules`: Bridge's target_modules
    may pick layers)."""
    assert lora.alpha is not None  # set_lora_scale ran
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": lora.rank,
        "lora_alpha": lora.alpha,
        "target_modules": peft_target_modules(lora.hf_modules(), num_layers),
        "lora_dropout": 0.0,
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "use_dora": False,
        "modules_to_save": None,
        "base_model_name_or_path": None,
        "inference_mode": True,
    }


def _write_adapter(
    lora: MegatronLora,
    source: ExportSource,
    config: JsonConfig | PretrainedConfig,
    geometry: Geometry,
    tmp: Path,
    dtype: str,
    verify: bool,
    progress: Progress | None,
    allow_nonfinite: bool,
) -> ExportResult:
    """adapter_model.safetensors under PEFT's names (`auto` keeps the stored dtype; B's rows
    split by `geometry`, as the base weights would be) and adapter_config.json. A tensor
    holding NaN/Inf is refused, naming the stored one it comes from, unless
    `allow_nonfinite` (`finite_only`): a diverged adapter was written without a word."""
    reader, stored = source.reader, source.reader.tensors
    sources: dict[str, tuple[str, str]] = {}  # PEFT name -> (HF weight, A or B)
    for weight in sorted(lora.targets):
        module = lora.targets[weight].module
        for which in ("A", "B"):
            sources[peft_name(AdapterKey(module, which, "default"))] = (weight, which)

    def key_of(name: str) -> str:
        weight, which = sources[name]
        target = lora.targets[weight]
        return target.a_key if which == "A" else target.b_key

    out_dtype = {name: choose_dtype(dtype, None, [stored[key_of(name)]]) for name in sources}

    def tensor(name: str) -> torch.Tensor:
        weight, which = sources[name]
        value = (
            lora.lora_a(reader, weight) if which == "A" else lora.lora_b(reader, weight, geometry)
        )
        return value.to(out_dtype[name].torch)

    def shape(name: str) -> tuple[int, ...]:
        weight, which = sources[name]
        a_shape = stored[lora.targets[weight].a_key].shape
        if which == "A":
            return tuple(a_shape)
        target = lora.targets[weight]
        rows = target.transform.shapes(stored[target.b_key].shape, geometry)[target.part][0]
        return (rows, a_shape[0])

    specs: list[Spec] = [(name, out_dtype[name], shape(name)) for name in sources]
    return write_peft_files(
        tmp,
        specs,
        tensor,
        lambda name: f"{source.location} [{key_of(name)}] (as {name})",
        lambda: peft_config(lora, int(config.num_hidden_layers)),
        config.model_type,
        verify=verify,
        progress=progress,
        allow_nonfinite=allow_nonfinite,
        notes=lora.notes,
    )


def adapter_only_checkpoint(source: ExportSource) -> bool:
    """Whether the checkpoint holds an adapter without its base weights: its model names are
    all a Megatron adapter's (a Megatron-Bridge PEFT save), or it holds a PEFT adapter's
    lora_A / lora_B, which peft saves with no base weight beside them (what else it saves,
    biases or modules_to_save, `split_adapters` refuses by name). A merge then needs base
    weights from elsewhere."""
    try:
        names = list(model_tensors(source.reader.tensors))
    except (MappingError, AmbiguousStateError):  # export's planning reports it
        return False
    adapters = [name for name in names if holds_adapters([name])]
    if adapters and adapter_kind(adapters) == PEFT_KIND:
        return True
    return bool(names) and len(adapters) == len(names)


def merge_onto_base(
    prepared: PreparedSource,
    hf_config: str | os.PathLike,
    out: Path,
    *,
    dtype: str,
    max_shard_size: int,
    verify: bool,
    overwrite: bool,
    lora_alpha: float | None,
    progress: Progress | None,
    drop_mtp: bool = False,
    allow_nonfinite: bool = False,
) -> ExportResult:
    """The merged model of a Megatron adapter saved alone and the base model in the
    --hf-config dir (its config.json and safetensors, the files transformers loads:
    `SafetensorsSource`): every base tensor written, each adapted one plus
    alpha / dim * B @ A. The base must have the adapter's shapes; the first one that does
    not is named. Adapters on multi-token prediction layers are refused, or left out with
    `drop_mtp`. A tensor written holding NaN/Inf is refused unless `allow_nonfinite`
    (`write_merged`). A config of a family with no mcore name table is refused before
    transformers builds it (`refuse_family_without_table`). Each adapter record read raw is
    checked against its CRC as it is read (`reading_checked`); with `verify` and no
    manifest, every one (`checking_crcs`)."""
    started = time.monotonic()
    given = Path(hf_config)
    root = given if given.is_dir() else given.parent
    if not any(root.glob("*.safetensors")):
        raise ExportUsageError(
            f"{root}: no *.safetensors base weights to merge the LoRA adapter onto"
            f"{other_weights_hint(root)}; pass --hf-config with the base model's dir"
            " (config.json and *.safetensors), or --adapter-only for a PEFT adapter"
        )
    source = prepared.source
    with claim_output(out, overwrite, top_level_names(prepared.assets)) as claim:
        tmp = claim.tmp
        write_assets(prepared.assets, tmp)
        refuse_family_without_table(source, tmp / HF_CONFIG_FILE, "auto", hf_config)
        config = load_copied_config(tmp / HF_CONFIG_FILE, prepared.asset_location)
        lora, mtp, geometry = plan_adapter(source, config, drop_mtp)
        assert lora is not None  # adapter_only_checkpoint said so, plan_adapter refuses MTP-only
        set_lora_scale(lora, source.location, prepared.local_paths, lora_alpha)
        base = SafetensorsSource(root)
        _check_base_fits(lora, source.reader, geometry, root, base.tensors)
        reader = (checking_crcs(source) if verify else reading_checked(source)).reader
        deltas = {
            weight: functools.partial(lora.delta, reader, weight, geometry)
            for weight in lora.targets
        }
        result = write_merged(
            config,
            prepared.assets,
            str(root),
            base,
            deltas,
            tmp,
            dtype,
            max_shard_size,
            verify,
            progress,
            allow_nonfinite=allow_nonfinite,
            adapter_notes=lora.notes,
        )
        publish_verified(claim, result)
    result.left_out(mtp)
    return result.published(out, started)


def _check_base_fits(
    lora: MegatronLora,
    reader: CheckpointReader,
    geometry: Geometry,
    root: Path,
    tensors: Mapping[str, StoredTensor],
) -> None:
    """Every weight the adapter adapts is in the base with the shape B_i @ A gives."""
    for weight, target in sorted(lora.targets.items()):
        a_shape = reader.tensors[target.a_key].shape
        b_shape = reader.tensors[target.b_key].shape
        rows = target.transform.shapes(b_shape, geometry)[target.part][0]
        needed = (rows, a_shape[1])
        found = tensors.get(weight)
        if found is None:
            raise ExportError(
                f"{root}: the base has no {weight}, which the adapter [{target.a_key}] adapts"
            )
        if tuple(found.shape) != needed:
            raise ExportError(
                f"{root} [{weight}]: shape {tuple(found.shape)} in the base, but the adapter"
                f" [{target.b_key}] needs {needed}: not the base it was trained on"
            )
