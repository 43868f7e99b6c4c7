"""LoRA on the model a run trains: PEFT adapters injected in place, the base frozen.

`peft.inject_adapter_in_model` replaces each target `nn.Linear` with PEFT's LoRA layer
inside the Hugging Face model itself, instead of wrapping the model in a `PeftModel`:
the module tree, `model.model.layers` (the sharding units) and the loss forward stay as
they are, and adapter parameters get PEFT's names
(`model.layers.0.self_attn.q_proj.lora_A.default.weight`), which export maps to a saved
adapter's names. Only adapter parameters require grad, so the optimizer (which takes
trainable parameters only), gradient reduction and the checkpoint see the adapter alone.
Frozen base weights are held in the compute dtype (`hold_frozen_in_compute_dtype`): they
never update, so an fp32 copy of them would only cost memory.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    set_model_state_dict,
)
from torch.distributed.checkpoint.stateful import Stateful

from mfsdp_ckpt.format.layout import CheckpointPaths
from mfsdp_ckpt.format.manifest import Manifest
from mfsdp_ckpt.lora import (
    ADAPTER_CONFIG_FILE,
    ADAPTER_WEIGHTS_FILE,
    MAX_ADAPTER_CONFIG_BYTES,
    not_plain_lora,
    peft_target_modules,
    plain_lora_init,
    read_base_model,
)
from mfsdp_ckpt.storage.unique_json import read_json_file
from trainer.config import ConfigError, ModelConfig, check_lora_fields
from trainer.resume import ResumeMismatchError
from trainer.weights_record import WeightsRecord, agreed_mismatch, writes_manifests

# The loss forward reads these weights directly (trainer/model.py), so an adapter on them
# would be silently skipped.
_UNADAPTABLE = ("lm_head", "embed_tokens")


@dataclass
class LoraSetup:
    """What a LoRA model knows about itself, for its checkpoint's manifest: its PEFT config
    and its base's weight files (`base`, hashed in the background)."""

    peft_config: dict[str, Any]  # JSON-safe PEFT LoraConfig (adapter_config.json contents)
    base: WeightsRecord


def lora_enabled(cfg: ModelConfig) -> bool:
    """verl's rule: a rank above 0 or an adapter to start from turns LoRA on."""
    return cfg.lora_rank > 0 or cfg.lora_adapter_path is not None


def apply_lora(model: torch.nn.Module, cfg: ModelConfig, seed: int) -> None:
    """Inject LoRA adapters into `model` in place and freeze everything else (no-op when off).

    Adapter init draws from torch's RNG, which the caller seeded identically on every rank."""
    check_lora_fields(cfg)
    if not lora_enabled(cfg):
        return
    from peft import LoraConfig, inject_adapter_in_model

    weights = None
    if cfg.lora_adapter_path is not None:
        config, weights = _read_adapter(Path(cfg.lora_adapter_path))
    else:
        config = LoraConfig(
            r=cfg.lora_rank,
            lora_alpha=cfg.lora_alpha,
            target_modules=cfg.target_modules,
            lora_dropout=0.0,
            bias="none",
            task_type="CAUSAL_LM",
        )
    _refuse_unsupported(config, cfg)
    try:
        inject_adapter_in_model(config, model)
    except ValueError as err:  # e.g. target modules not found in the model
        raise ConfigError(f"model.target_modules: {str(err).splitlines()[0]}") from None
    adapted = _adapted_modules(model)
    wrong = sorted({name.rsplit(".", 1)[-1] for name in adapted} & set(_UNADAPTABLE))
    if wrong:
        raise ConfigError(
            f"model.target_modules: {', '.join(wrong)} cannot take a LoRA adapter here "
            "(the loss reads its weight directly); adapt the decoder's linear layers"
        )
    if weights is not None:
        _load_adapter_weights(model, weights, cfg.lora_adapter_path)
    for name, param in model.named_parameters():
        param.requires_grad_(is_adapter_param(name))
    model._mfsdp_lora = LoraSetup(
        peft_config=_json_safe_config(config, adapted, _layer_count(model)),
        base=WeightsRecord.of_dir(
            cfg.path, random_init=cfg.random_init, seed=seed, label="base-model"
        ),
    )


def is_adapter_param(name: str) -> bool:
    return ".lora_A." in name or ".lora_B." in name


def is_lora_model(model: torch.nn.Module) -> bool:
    return getattr(hf_model(model), "_mfsdp_lora", None) is not None


def hf_model(model: torch.nn.Module) -> torch.nn.Module:
    """The Hugging Face model itself: Megatron-FSDP wraps it (`.module`), FSDP2 shards it in
    place. LoRA's record and parameter names live on the Hugging Face model."""
    if hasattr(model, "_mfsdp_lora"):
        return model
    inner = getattr(model, "module", None)
    return inner if isinstance(inner, torch.nn.Module) else model


def _lora_layers(model: torch.nn.Module) -> Iterator[tuple[str, Any]]:
    """(name, PEFT LoRA layer) for every adapted module; the name is the module's own, so
    `name + ".base_layer.weight"` is its frozen weight's state-dict key."""
    from peft.tuners.lora import LoraLayer

    for name, module in hf_model(model).named_modules():
        if isinstance(module, LoraLayer) and len(module.lora_A):
            yield name, module


def lora_scales(model: torch.nn.Module) -> dict[str, tuple[str, float]]:
    """Adapted module name -> (its active adapter, the scale PEFT multiplies B @ A by)."""
    scales = {}
    for name, module in _lora_layers(model):
        (adapter,) = module.active_adapters  # apply_lora injects exactly one adapter
        scales[name] = (adapter, float(module.scaling[adapter]))
    return scales


@contextmanager
def adapters_disabled(model: torch.nn.Module) -> Iterator[None]:
    """Inside, every LoRA layer computes its base layer alone: the model is the base model.

    The GRPO reference policy is the base, so this gives reference log-probs from the actor
    itself, with no second copy of the weights. It flips the flag PEFT's forward reads instead
    of calling `enable_adapters(False)`, which also sets `requires_grad` on the adapter
    parameters: under FSDP2 the parameters registered between forwards may be the gathered
    ones rather than the sharded ones the optimizer holds, so that toggle could land on the
    wrong tensors and leave the adapter without gradients afterwards."""
    layers = [module for _, module in _lora_layers(model)]
    before = [module._disable_adapters for module in layers]
    for module in layers:
        module._disable_adapters = True
    try:
        yield
    finally:
        for module, flag in zip(layers, before):
            module._disable_adapters = flag


def hold_frozen_in_compute_dtype(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """Cast parameters that do not train to `dtype` before sharding: they are only ever read
    in the compute dtype. (FSDP2 needs one original dtype across the trainable parameters of
    a unit, not across frozen ones, so fp32 adapters sit next to bf16 base weights.)"""
    for param in model.parameters():
        if not param.requires_grad and param.is_floating_point():
            param.data = param.data.to(dtype)


def _read_adapter(path: Path) -> tuple[Any, dict[str, torch.Tensor]]:
    """A local PEFT adapter dir: its LoraConfig and weights (safetensors only: never unpickled).
    adapter_config.json is read as every JSON a user hands over (`read_json_file`): bounded
    (1 GiB of it took 2.5 GB of memory), and nesting 5000 deep is one line, no traceback."""
    from peft import LoraConfig
    from safetensors.torch import load_file

    config_file, weights_file = path / ADAPTER_CONFIG_FILE, path / ADAPTER_WEIGHTS_FILE
    for needed in (config_file, weights_file):
        if not needed.is_file():
            raise ConfigError(
                f"model.lora_adapter_path: {needed} is missing "
                f"(a PEFT adapter dir has {ADAPTER_CONFIG_FILE} and {ADAPTER_WEIGHTS_FILE})"
            )
    try:
        fields = read_json_file(config_file, MAX_ADAPTER_CONFIG_BYTES, ConfigError)
    except ConfigError as err:
        raise ConfigError(f"model.lora_adapter_path: {err}") from None
    if not isinstance(fields, dict) or fields.get("peft_type") != "LORA":
        raise ConfigError(f"model.lora_adapter_path: {config_file} is not a LoRA adapter config")
    known = set(LoraConfig.__dataclass_fields__)
    # Dropout draws from the RNG, which checkpoints do not carry: 0 keeps resume exact.
    config = LoraConfig(
        **{k: v for k, v in fields.items() if k in known and k != "lora_dropout"}, lora_dropout=0.0
    )
    return config, load_file(str(weights_file))


def _refuse_unsupported(config: Any, cfg: ModelConfig) -> None:
    """PEFT settings that change what the adapter computes beyond plain B @ A * alpha / r:
    export merges plain LoRA only, so a run refuses them up front rather than at export. An
    init that is not plain LoRA's (PiSSA, OLoRA, ...) is refused before peft injects it:
    injecting rewrites the frozen base in place, which the merged export and GRPO's
    reference (adapters off) then no longer are."""
    where = "model"
    if cfg.lora_adapter_path:
        where = f"model.lora_adapter_path ({cfg.lora_adapter_path})"
    found = not_plain_lora(lambda name, plain: getattr(config, name, plain))
    if found is not None:
        raise ConfigError(f"{where}: LoRA option {found[0]}={found[1]!r} is not supported")
    init = getattr(config, "init_lora_weights", True)
    if not plain_lora_init(init):
        raise ConfigError(
            f"{where}: init_lora_weights={init!r:.120} is not plain LoRA's init (peft would rewrite"
            " the frozen base weights with it, and the merged export and GRPO's reference"
            " use the base as saved); use an adapter with init_lora_weights true, false or"
            " gaussian"
        )


def _adapted_modules(model: torch.nn.Module) -> list[str]:
    return [name for name, _ in _lora_layers(model)]


def _load_adapter_weights(model: torch.nn.Module, weights: dict, path: str | None) -> None:
    """Load a saved adapter's tensors (PEFT's names) into the injected layers, all or nothing."""
    from peft import set_peft_model_state_dict

    result = set_peft_model_state_dict(model, weights)
    unexpected = list(result.unexpected_keys)
    missing = [key for key in result.missing_keys if is_adapter_param(key)]
    if unexpected or missing:
        example = (unexpected or missing)[0]
        raise ConfigError(
            f"model.lora_adapter_path: {path} does not fit this model ({len(unexpected)} "
            f"unexpected, {len(missing)} missing adapter weights, e.g. {example})"
        )


def _layer_count(model: torch.nn.Module) -> int | None:
    """The decoder's layer count from the Hugging Face config (None when it names none)."""
    count = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    return count if isinstance(count, int) else None


def _json_safe_config(config: Any, adapted: list[str], num_layers: int | None) -> dict[str, Any]:
    """adapter_config.json contents. target_modules names exactly the adapted layers
    (`peft_target_modules`): their own names (q_proj, ...) when every layer has them, which
    PEFT matches by suffix and vLLM's LoRA loader expects; else their full paths."""
    data = config.to_dict()
    data["target_modules"] = peft_target_modules(adapted, num_layers)
    if isinstance(data["lora_alpha"], float) and data["lora_alpha"].is_integer():
        data["lora_alpha"] = int(data["lora_alpha"])  # as verl and PEFT write it
    data["inference_mode"] = True  # what a saved adapter says (PEFT's save_pretrained sets it)
    data["peft_type"] = str(getattr(data["peft_type"], "value", data["peft_type"]))
    task = data.get("task_type")
    data["task_type"] = str(getattr(task, "value", task)) if task is not None else None
    return json.loads(json.dumps(data, default=_jsonable))


def _jsonable(value: Any) -> Any:
    """Sets (PEFT keeps some fields as sets) become sorted lists; nested configs, dicts."""
    if isinstance(value, (set, frozenset, tuple)):
        return sorted(value)
    return value.to_dict() if hasattr(value, "to_dict") else str(value)


def _refuse_another_scale(
    manifest: Manifest, peft_config: dict[str, Any], paths: CheckpointPaths
) -> None:
    """The adapter adds alpha / r * B @ A (alpha / sqrt(r) with rslora): continuing it with
    another lora_alpha loaded the trained A and B and scaled them anew, a different model
    (rank and targets are refused as the checkpoint's keys and shapes differ)."""
    recorded = manifest.lora if isinstance(manifest.lora, dict) else {}
    for key, setting in (("lora_alpha", "model.lora_alpha"), ("use_rslora", "use_rslora")):
        trained, now = recorded.get(key), peft_config.get(key)
        if trained is not None and now is not None and trained != now:
            raise ResumeMismatchError(
                f"{paths.manifest}: the adapter was trained with {key} {trained!r}, this run"
                f" has {now!r} ({setting}): its scale would change; set it back (or"
                " a new trainer.run_dir to start over)"
            )


class AdapterState:
    """The checkpoint's `model` entry for a LoRA run: the trainable (adapter) parameters only,
    as sharded DTensors; the frozen base comes back from the base model when the run is built.
    Also describes the adapter and its base for the manifest (`Checkpointer`).

    `full` is the strategy's whole-model state (Hugging Face names) to take the adapter from,
    when torch's `get_model_state_dict` does not fit the wrapper (Megatron-FSDP); its
    `load_state_dict` must accept a subset of the keys."""

    def __init__(self, model: torch.nn.Module, full: Stateful | None = None):
        self.model, self.full = model, full
        inner = hf_model(model)
        self.setup: LoraSetup = inner._mfsdp_lora
        self.trainable = {name for name, param in inner.named_parameters() if param.requires_grad}
        if writes_manifests():
            self.setup.base.start()

    def state_dict(self) -> dict[str, Any]:
        whole = self.full.state_dict() if self.full else get_model_state_dict(self.model)
        return {k: v for k, v in whole.items() if k in self.trainable}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if self.full is not None:
            self.full.load_state_dict(state_dict)
            return
        # strict=False: the frozen base is absent on purpose; the checkpointer has already
        # refused a checkpoint that lacks any adapter key asked for.
        set_model_state_dict(self.model, state_dict, options=StateDictOptions(strict=False))

    def check_manifest(self, manifest: Manifest | None, paths: CheckpointPaths) -> None:
        """Refuse to continue an adapter on another base than it was trained on: it would load
        without complaint and train a different model. Rank 0 compares the base files'
        digests (hashed anyway for the manifest; hashed again with sha256 for an adapter
        saved before XXH3) and tells the others, so every rank stops together."""
        if manifest is None:
            return
        _refuse_another_scale(manifest, self.setup.peft_config, paths)
        if manifest.base_model is None:
            return
        problem = agreed_mismatch(
            lambda: read_base_model(manifest, str(paths.manifest)),
            self.setup.base,
            trained="adapter was trained on",
            here="this run's base",
        )
        if problem is not None:
            raise ResumeMismatchError(
                f"{paths.manifest}: {problem}; set model.path to that base "
                "(or a new trainer.run_dir to start over)"
            )

    def manifest_fields(self) -> dict[str, Any]:
        base = self.setup.base.result()
        config = dict(self.setup.peft_config, base_model_name_or_path=base.path)
        return {"base_model": base.to_dict(), "lora": config}
