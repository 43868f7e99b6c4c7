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
from typing import Any, cast

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    set_model_state_dict,
)
from torch.distributed.checkpoint.stateful import Stateful

from mfsdp_ckpt.command_as_run import mfsdp_command
from mfsdp_ckpt.errors import MfsdpError
from mfsdp_ckpt.format.dcp_metadata import load_metadata
from mfsdp_ckpt.format.layout import DCP_METADATA_FILE, CheckpointPaths
from mfsdp_ckpt.format.manifest import Manifest
from mfsdp_ckpt.lora import (
    parse_adapter_key,
    peft_target_modules,
    read_base_model,
    unrecorded_base,
)
from trainer.config import RESOLVED_CONFIG_FILE, ConfigError, ModelConfig, check_lora_fields
from trainer.lora_adapter_config import peft_default
from trainer.lora_adapter_dir import (
    KEY,
    AdapterDir,
    adapter_resume_remedy,
    listed_targets,
    load_adapter_weights,
    note_replaced_settings,
    read_adapter_dir,
    recorded_adapter_path,
    same_setting,
    set_by_adapter,
)
from trainer.lora_scale import refuse_overflowing_scale
from trainer.lora_targets import (
    named_exclusions,
    named_targets,
    refuse_rank_past_weights,
    refuse_untrainable_targets,
)
from trainer.resume import ResumeMismatchError
from trainer.weights_record import (
    WeightsRecord,
    agreed_mismatch,
    weights_remedy,
    writes_manifests,
)


@dataclass
class LoraSetup:
    """What a LoRA model knows about itself, for its checkpoint's manifest: its PEFT config
    and its base's weight files (`base`, hashed in the background: a model dir's, or a
    checkpoint's DCP files where `model.path` names one)."""

    peft_config: dict[str, Any]  # JSON-safe PEFT LoraConfig (adapter_config.json contents)
    base: WeightsRecord
    adapter_config: Path | None = None  # the adapter dir's config its settings came from


# A fresh adapter's dropout: verl's LoRA config sets none, so PEFT's default (0) trains there.
# An adapter dir's own lora_dropout trains as saved (`read_adapter_dir` checks it); either
# resumes exactly, as every step draws its masks from (seed, step, rank) (trainer/runner.py).
FRESH_ADAPTER_DROPOUT = 0.0
# Settings that change what an adapter's steps compute, but neither the checkpoint's keys and
# shapes (r and the targets: refused before the load, `trainer.resume.check_lora_rank` and
# `_refuse_other_targets`) nor the adapter's scale (refused, `_refuse_another_scale`): a
# resume with another value trains on and says so (`changed_since_checkpoint`).
# init_lora_weights only decides the weights of step 0, which a resume loads from the
# checkpoint instead.
NOTED_ON_RESUME = ("lora_dropout",)
_MODEL_STATE = "model."  # the prefix of the model state's keys in a checkpoint's DCP metadata


def lora_enabled(cfg: ModelConfig) -> bool:
    """verl's rule: a rank above 0 or an adapter to start from turns LoRA on."""
    return cfg.lora_rank > 0 or cfg.lora_adapter_path is not None


def apply_lora(model: torch.nn.Module, cfg: ModelConfig, seed: int) -> None:
    """Inject LoRA adapters into `model` in place and freeze everything else (no-op when off).

    Adapter init draws from torch's RNG, which the caller seeded identically on every rank.
    PEFT gets module names only, never a regex, and only linear layers of the decoder
    (`trainer.lora_targets`), and an adapter dir's fields and tensors checked
    (`trainer.lora_adapter_dir`)."""
    check_lora_fields(cfg)
    if not lora_enabled(cfg):
        return
    from peft import LoraConfig, inject_adapter_in_model

    settings, adapter = _requested_settings(cfg)
    alpha_key = (
        "model.lora_alpha" if adapter is None else f"{KEY}: {adapter.config_file}: lora_alpha"
    )
    refuse_overflowing_scale(settings, alpha_key)
    targets_key = "model.target_modules"
    if adapter is not None:
        if writes_manifests():  # the main rank: a note said once, not once per rank
            note_replaced_settings(cfg, adapter)
        targets_key = f"{KEY}: {adapter.config_file}: target_modules"
    names = [name for name, _ in model.named_modules()]
    exclusions_key = targets_key.replace("target_modules", "exclude_modules")
    config = LoraConfig(
        **{
            **settings,
            "target_modules": named_targets(settings["target_modules"], names, targets_key),
            "exclude_modules": named_exclusions(
                settings.get("exclude_modules"), names, exclusions_key
            ),
            "bias": "none",
            "task_type": "CAUSAL_LM",
        }
    )
    refuse_untrainable_targets(config, model, targets_key)
    rank_key = "model.lora_rank" if adapter is None else f"{KEY}: {adapter.config_file}: r"
    refuse_rank_past_weights(config, model, rank_key)
    try:
        inject_adapter_in_model(config, model)
    except ValueError as err:  # PEFT's own checks; its messages span lines
        raise ConfigError(f"{targets_key}: {' '.join(str(err).split())}") from None
    adapted = _adapted_modules(model)
    if adapter is not None:
        load_adapter_weights(model, adapter)
    for name, param in model.named_parameters():
        param.requires_grad_(is_adapter_param(name))
    # torch types Module.__setattr__ for Tensor | Module values; a plain attribute takes any
    model._mfsdp_lora = LoraSetup(  # type: ignore[assignment]
        peft_config=_json_safe_config(config, adapted, _layer_count(model)),
        base=WeightsRecord.of_model(cfg, seed=seed, label="base-model"),
        adapter_config=adapter.config_file if adapter is not None else None,
    )


def _requested_settings(cfg: ModelConfig) -> tuple[dict[str, Any], AdapterDir | None]:
    """The LoraConfig fields a LoRA run of `cfg` asks for, and the adapter dir they come
    from: that dir's own (`read_adapter_dir`), else the model.* keys and a fresh adapter's
    dropout (None)."""
    if cfg.lora_adapter_path is not None:
        adapter = read_adapter_dir(Path(cfg.lora_adapter_path))
        return adapter.settings, adapter
    fresh = dict(
        r=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha,
        target_modules=cfg.target_modules,
        lora_dropout=FRESH_ADAPTER_DROPOUT,
    )
    return fresh, None


def changed_since_checkpoint(recorded: dict[str, Any], cfg: ModelConfig) -> list[str]:
    """`NOTED_ON_RESUME` settings a resumed LoRA run of `cfg` applies that differ from those
    its checkpoint's manifest `recorded` (its `lora` record), each as "name then -> now
    (where now is set)". An adapter dir's fields are read anew at every start, so an edited
    adapter_config.json (or one whose field older mfsdp forced to another value) trained
    from the resumed step on with another setting, and the next manifest recorded it for
    the whole run; a key the record lacks is not compared."""
    if not lora_enabled(cfg):
        return []
    settings, adapter = _requested_settings(cfg)
    source = str(adapter.config_file) if adapter is not None else f"{KEY} unset: a fresh adapter"
    changes = []
    for name in NOTED_ON_RESUME:
        then, now = recorded.get(name), settings.get(name, peft_default(name))
        if then is not None and then != now:
            changes.append(f"{name} {then!r} -> {now!r} ({source})")
    return changes


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


def _adapted_modules(model: torch.nn.Module) -> list[str]:
    return [name for name, _ in _lora_layers(model)]


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


def _refuse_another_scale(manifest: Manifest, setup: LoraSetup, paths: CheckpointPaths) -> None:
    """The adapter adds alpha / r * B @ A (alpha / sqrt(r) with rslora): continuing it with
    another lora_alpha loaded the trained A and B and scaled them anew, a different model
    (the rank is compared before the load, `trainer.resume.check_lora_rank`; targets before
    the checkpoint's keys are, `_refuse_other_targets`)."""
    recorded = manifest.lora if isinstance(manifest.lora, dict) else {}
    for key in ("lora_alpha", "use_rslora"):
        trained, now = recorded.get(key), setup.peft_config.get(key)
        if trained is not None and now is not None and trained != now:
            has, remedy = _changed_setting(key, now, recorded, setup, paths)
            raise ResumeMismatchError(
                f"{paths.manifest}: the adapter was trained with {key} {trained!r}, this run"
                f" has {has}: its scale would change; {remedy} (or a new trainer.run_dir to"
                " start over)"
            )


def _refuse_other_targets(
    manifest: Manifest, setup: LoraSetup, adapted: set[str], paths: CheckpointPaths
) -> None:
    """Adapters on other modules than the checkpoint's (another model.target_modules, or
    an adapter dir with other target_modules): refused naming the targets, trained (the
    manifest's record) and this run's, where the load listed the checkpoint's keys this
    run lacks. Only a checkpoint whose adapted modules (its keys) differ from this run's
    `adapted` is refused: a record written in another form (a regex, all-linear) that
    adapts the same modules resumes."""
    recorded = manifest.lora if isinstance(manifest.lora, dict) else {}
    trained, now = recorded.get("target_modules"), setup.peft_config.get("target_modules")
    if trained is None or same_setting(trained, now):
        return
    stored = _modules_with_adapter_weights(paths)
    if stored is None or stored == adapted:
        return
    has, remedy = _changed_setting("target_modules", now, recorded, setup, paths)
    raise ResumeMismatchError(
        f"{paths.manifest}: the adapter was trained with target_modules"
        f" {listed_targets(trained)}, this run has {has}: the checkpoint's adapter weights are of"
        f" other modules; {remedy} (or a new trainer.run_dir to start over)"
    )


def _changed_setting(
    key: str, now: Any, recorded: dict[str, Any], setup: LoraSetup, paths: CheckpointPaths
) -> tuple[str, str]:
    """(this run's value of adapter setting `key` with what sets it, what resumes the step):
    its adapter dir's field (`set_by_adapter`; the model.* key beside it is not used), else
    the model.* key to set back."""
    if setup.adapter_config is not None:
        has = set_by_adapter(setup.adapter_config, key, now)
        return has, adapter_resume_remedy(recorded, paths.run_dir)
    if key == "target_modules":
        return f"model.target_modules={listed_targets(now)}", "set it back"
    return f"{now!r} ({_setting_of(key, paths)})", "set it back"


def _modules_with_adapter_weights(paths: CheckpointPaths) -> set[str] | None:
    """The modules the checkpoint holds adapter weights of, from its DCP metadata's model
    keys; None when that cannot be read (the load says why)."""
    try:
        stored = load_metadata(paths.dist_ckpt / DCP_METADATA_FILE).state_dict_metadata
    except (MfsdpError, OSError, ValueError):
        return None
    keys = (parse_adapter_key(k[len(_MODEL_STATE) :]) for k in stored if k.startswith(_MODEL_STATE))
    return {key.module for key in keys if key is not None}


def _setting_of(key: str, paths: CheckpointPaths) -> str:
    """The config key that sets the adapter's `key` in a run without an adapter dir, for a
    refusal to name. use_rslora has no model.* key: only the adapter dir a run starts from
    sets it, which the run dir's config.yaml records (a refusal that named "use_rslora"
    pointed at no key)."""
    if key != "use_rslora":
        return f"model.{key}"
    record = paths.run_dir / RESOLVED_CONFIG_FILE if paths.run_dir is not None else None
    started_from = recorded_adapter_path(record) if record is not None else None
    if started_from is None:
        return f"set by {KEY}, the adapter dir the run started from"
    return f"set by {KEY}; {record} records {KEY}={started_from}"


def _refuse_unrecorded_base(manifest: Manifest, paths: CheckpointPaths) -> None:
    """A step whose base record lists no file (`unrecorded_base`: a run whose model.path was
    a checkpoint wrote such records before its files were recorded) cannot be checked
    against this run's base, which may be other weights by now (a run dir whose tracker
    moved on): refused on every rank alike (each reads the record from the manifest), with
    the route that keeps the trained adapter."""
    trained_on = read_base_model(manifest, str(paths.manifest))
    unrecorded = unrecorded_base(trained_on) if trained_on is not None else None
    if trained_on is None or unrecorded is None:
        return
    step = paths.step_dir or paths.dist_ckpt
    export = mfsdp_command("ckpt export-hf", step, "--adapter-only --out DIR")
    raise ResumeMismatchError(
        f"{paths.manifest}: {unrecorded}; to go on with its adapter, {export}, then a new"
        " trainer.run_dir with"
        f" model.path={trained_on.path} model.lora_adapter_path=DIR"
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
        self.setup = cast(LoraSetup, inner._mfsdp_lora)
        self.trainable = {name for name, param in inner.named_parameters() if param.requires_grad}
        if writes_manifests():
            self.setup.base.start()

    @property
    def lora_rank(self) -> int:
        """The adapter's rank (PEFT's `r`), which a resume compares with the one its checkpoint
        was trained with (`trainer.resume.check_lora_rank`) before loading a tensor."""
        return int(self.setup.peft_config["r"])

    @property
    def adapter_config(self) -> Path | None:
        """The adapter dir's adapter_config.json this run's settings come from (None: the
        model.* keys), which a refused resume names as what sets the rank."""
        return self.setup.adapter_config

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
        _refuse_another_scale(manifest, self.setup, paths)
        _refuse_other_targets(manifest, self.setup, set(_adapted_modules(self.model)), paths)
        if manifest.base_model is None:
            return
        _refuse_unrecorded_base(manifest, paths)
        problem = agreed_mismatch(
            lambda: read_base_model(manifest, str(paths.manifest)),
            self.setup.base,
            trained="adapter was trained on",
            here="this run's base",
        )
        if problem is not None:
            trained_on = read_base_model(manifest, str(paths.manifest))
            assert trained_on is not None  # manifest.base_model is, and from_json checked it
            remedy = weights_remedy(trained_on, self.setup.base.path, "the base it was trained on")
            raise ResumeMismatchError(f"{paths.manifest}: {problem}; {remedy}")

    def manifest_fields(self) -> dict[str, Any]:
        base = self.setup.base.result()
        config = dict(self.setup.peft_config, base_model_name_or_path=base.path)
        return {"base_model": base.to_dict(), "lora": config}
