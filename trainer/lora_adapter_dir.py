"""A PEFT adapter dir (`model.lora_adapter_path`) read as data, each field and tensor checked.

An adapter dir comes from elsewhere (the Hub, another trainer). Its adapter_config.json was
handed to PEFT's LoraConfig as it stood, and its adapter_model.safetensors loaded whole: `r`
as text ("4"), an unknown task_type, target_modules 5, a cut-short file or a tensor of
another shape were each a traceback in every rank, and `r: -1` was blamed on
model.target_modules. Here every field LoraConfig is built from is checked first, as plain
JSON (`trainer.lora_adapter_config`, which the launching process runs too), the others must
say what plain LoRA says (or are metadata), a field the installed peft does not know must be
off (peft drops it: a newer peft's variant trained as plain LoRA), and the weights file is
read through the project's safetensors reader (`SafetensorsSource`: header checked against
the file, no pickle, nothing read until every tensor's name and shape fit the model). Both
files are read as a model dir's are (`safe_files.model_dir_root`): a regular file inside the
dir, bounded in size, never through a link that leads out of it. Each refusal is one line
naming model.lora_adapter_path, the file and the key or tensor: a field PEFT would fill with
its default is said to be absent, a tensor holding NaN/Inf is named as it loads, and a dir
holding an adapter elsewhere (verl's actor dir, an mfsdp LoRA run) says where it is. A
resume refused for a setting the adapter dir gives names that file as what sets it, with
what resumes the step (`set_by_adapter`, `adapter_resume_remedy`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch

from mfsdp_ckpt.check.printable import cut_to, first_of
from mfsdp_ckpt.convert.megatron_lora import PEFT_KIND
from mfsdp_ckpt.convert.weight_dtype import adapter_weight, refuse_non_float
from mfsdp_ckpt.format.finite import count_nonfinite_tensor
from mfsdp_ckpt.format.lora_fields import plain_lora_init
from mfsdp_ckpt.lora import (
    ADAPTER_CONFIG_FILE,
    ADAPTER_WEIGHTS_FILE,
    PEFT_PREFIX,
    parse_adapter_key,
)
from mfsdp_ckpt.storage.safetensors_source import SafetensorsError, SafetensorsSource
from trainer.config import RESOLVED_CONFIG_FILE, ConfigError, ModelConfig
from trainer.config_yaml import YAMLConfigError, read_yaml_file
from trainer.finite_weights import NonFiniteWeightsError
from trainer.lora_adapter_config import USED, read_adapter_config
from trainer.lora_adapter_hints import KEY

log = logging.getLogger("mfsdp.model")
ADAPTER_NAME = "default"  # the adapter name `peft.inject_adapter_in_model` gives
# adapter_config.json fields that say where the adapter came from, not what it computes
METADATA = frozenset(
    {
        "peft_type",
        "auto_mapping",
        "peft_version",
        "base_model_name_or_path",
        "revision",
        "inference_mode",
        "megatron_core",
        "qalora_group_size",  # read only with use_qalora, which must be false
        "runtime_config",
    }
)


# model.* keys whose value an adapter dir's own field replaces, with that field
REPLACED = {"lora_rank": "r", "lora_alpha": "lora_alpha", "target_modules": "target_modules"}


@dataclass(frozen=True)
class AdapterDir:
    """An adapter dir whose config and weights file header have been checked."""

    path: Path
    settings: dict[str, Any]  # the USED fields it sets, each checked
    weights: SafetensorsSource  # adapter_model.safetensors, its header checked

    @property
    def config_file(self) -> Path:
        return self.path / ADAPTER_CONFIG_FILE

    @property
    def weights_file(self) -> Path:
        return self.path / ADAPTER_WEIGHTS_FILE


def read_adapter_dir(path: Path) -> AdapterDir:
    """The adapter dir at `path`, its adapter_config.json fields and its weights file's
    header checked; ConfigError naming the file and the key otherwise."""
    config_file, weights_file = path / ADAPTER_CONFIG_FILE, path / ADAPTER_WEIGHTS_FILE
    data, settings = read_adapter_config(path)
    _refuse_unknown_options(data, config_file)
    _refuse_not_plain(data, path)
    try:
        weights = SafetensorsSource(path, only=ADAPTER_WEIGHTS_FILE)
    except SafetensorsError as err:
        raise ConfigError(f"{KEY}: {err}") from None
    _refuse_another_rank(settings["r"], weights, config_file, weights_file)
    return AdapterDir(path, settings, weights)


def _refuse_another_rank(
    rank: int, weights: SafetensorsSource, config_file: Path, weights_file: Path
) -> None:
    """ConfigError naming the first adapter tensor whose rank (lora_A's first dimension,
    lora_B's second) is not adapter_config.json's `r`, read from the header alone: PEFT
    builds every adapter matrix from `r` before a tensor is compared, so a mistaken r of
    2**40 was "out of memory" for 562 TB, and one of a few million first took GBs."""
    for name, entry in sorted(weights.tensors.items()):
        param = _parameter_of(name)
        key = parse_adapter_key(param) if param is not None else None
        if key is None or len(entry.shape) != 2:  # named when compared with the model
            continue
        carried = entry.shape[0 if key.which == "A" else 1]
        if carried != rank:
            raise ConfigError(
                f"{KEY}: {weights_file} [{name}]: shape {list(entry.shape)} carries rank"
                f" {carried}, but {config_file} says r={rank}; set r to the rank the adapter"
                " was trained with"
            )


def note_replaced_settings(cfg: ModelConfig, adapter: AdapterDir) -> None:
    """model.lora_rank, lora_alpha or target_modules beside model.lora_adapter_path: the
    adapter's own r, lora_alpha and target_modules train, as in verl (a script that keeps
    its first stage's lora_rank beside the adapter runs there), so a value that is neither
    the key's default nor the adapter's is not refused; one note says it is not used,
    where it was dropped without a word (and config.yaml records it, against the
    manifest)."""
    defaults = {field.name: field.default for field in fields(ModelConfig)}
    for key, name in REPLACED.items():
        given, own = getattr(cfg, key), adapter.settings[name]
        if not same_setting(given, defaults[key]) and not same_setting(given, own):
            log.warning(
                "note: model.%s=%s is not used: %s has %s %s, which is what trains (as verl"
                " trains an adapter it is given)",
                key,
                cut_to(repr(given), 120),
                adapter.config_file,
                name,
                cut_to(repr(own), 120),
            )


def set_by_adapter(config_file: Path, name: str, value: Any) -> str:
    """A setting this run takes from its adapter dir, as a resume refusal names it: the
    field, the file and the key that gives the file. The model.* key beside it is not used
    (`note_replaced_settings`), and a refusal that said to set that key back named a key no
    value of which could clear it."""
    shown = listed_targets(value) if isinstance(value, list) else cut_to(repr(value), 120)
    return f"{name} {shown} from {config_file} ({KEY})"


def adapter_resume_remedy(trained: dict[str, Any], run_dir: Path | None) -> str:
    """What resumes a step whose adapter `trained` (its manifest's `lora` record, empty for
    a step without LoRA) differs from the one this run's adapter dir sets: that dir is
    read anew at each start, so the run's own adapter dir (which `run_dir`'s config.yaml
    records), or no adapter dir and model.lora_rank, model.lora_alpha and
    model.target_modules at the trained values (the step's weights replace a fresh
    adapter's init; rslora has no model.* key, so not for an rslora adapter)."""
    if not trained:
        return f"drop {KEY} (the checkpoint trained no adapter)"
    record = run_dir / RESOLVED_CONFIG_FILE if run_dir is not None else None
    started_from = recorded_adapter_path(record) if record is not None else None
    if started_from is None:
        remedy = f"point {KEY} at the adapter dir the run started from"
    elif started_from == "null":
        remedy = f"drop {KEY} ({record} records none: the run started from a fresh adapter)"
    else:
        remedy = (
            f"point {KEY} at the adapter dir the run started from ({record} records"
            f" {KEY}={started_from})"
        )
    rank, alpha, targets = (trained.get(k) for k in ("r", "lora_alpha", "target_modules"))
    if trained.get("use_rslora") or rank is None or alpha is None:
        return remedy
    fresh = f"model.lora_rank={rank} and model.lora_alpha={alpha}, the trained values"
    if isinstance(targets, list):
        fresh = (
            f"model.lora_rank={rank}, model.lora_alpha={alpha} and"
            f" model.target_modules={listed_targets(targets)}, the trained values"
        )
    either = " and set" if started_from == "null" else ", or drop it and set"
    return f"{remedy}{either} {fresh}"


def listed_targets(targets: Any) -> Any:
    """target_modules as a line shows it: a list as model.target_modules takes it, its
    first few names (a regex or all-linear, as it is)."""
    return f"[{first_of(targets, 8)}]" if isinstance(targets, list) else targets


def recorded_adapter_path(record: Path) -> str | None:
    """model.lora_adapter_path as the config file `record` holds it ("null" when unset);
    None when it cannot be read or holds no such key (a refusal is said without it)."""
    try:
        config = read_yaml_file(record)
    except YAMLConfigError:
        return None
    model, name = config.get("model") if isinstance(config, dict) else None, KEY.split(".")[1]
    if not isinstance(model, dict) or name not in model:
        return None
    return "null" if model[name] is None else str(model[name])


def same_setting(one: Any, other: Any) -> bool:
    """Equal, a list of module names in any order."""
    if isinstance(one, list) and isinstance(other, list):
        return sorted(set(one)) == sorted(set(other))
    return bool(one == other)


def _refuse_unknown_options(data: dict[str, Any], config_file: Path) -> None:
    """A field the installed peft's LoraConfig (with its PeftConfig bases) does not know,
    set to a value that turns something on: peft drops it with a warning and builds plain
    LoRA, so an adapter saved by a newer peft with a variant switch trained as another
    model than it is, and its export was written without the field. Unknown fields that are
    off pass: a newer peft writes every field it has, most at their defaults."""
    import peft

    known = {field.name for field in fields(peft.LoraConfig)} | METADATA
    found = next(
        ((name, value) for name, value in data.items() if name not in known and not _off(value)),
        None,
    )
    if found is not None:
        raise ConfigError(
            f"{KEY}: {config_file}: {found[0]}={cut_to(repr(found[1]), 120)} is a LoRA option the"
            " installed"
            f" peft {peft.__version__} does not know (an adapter saved by a newer peft?): it"
            " would be dropped and the adapter trained as plain LoRA; use a peft that knows it"
        )


def _off(value: Any) -> bool:
    """Whether a field's value leaves what it names off: null, false, zero, empty or
    "none" (as PEFT writes a switch, a count or a nested config it does not use)."""
    if isinstance(value, str):
        return value.strip().lower() in ("", "none")
    if isinstance(value, (dict, list)):
        return not value
    return value is None or (isinstance(value, (int, float)) and value == 0)  # false is 0


def _refuse_not_plain(data: dict[str, Any], path: Path) -> None:
    """Settings that change what the adapter computes beyond plain B @ A * alpha / r:
    export merges plain LoRA only, so a run refuses them up front rather than at export.
    `lora_settings` refused the known ones (NOT_PLAIN_LORA); any other LoraConfig field
    that is neither used nor metadata must hold its default (PEFT keeps adding variants).
    An init that is not plain LoRA's (PiSSA, OLoRA, ...) is refused before peft injects
    it: injecting rewrites the frozen base in place, which the merged export and GRPO's
    reference (adapters off) then no longer are."""
    from peft import LoraConfig

    where = f"{KEY} ({path})"
    found = next(
        (
            (field.name, data[field.name])
            for field in fields(LoraConfig)
            if field.name in data
            and field.name not in USED | METADATA
            and data[field.name]
            and data[field.name] != field.default
        ),
        None,
    )
    if found is not None:
        raise ConfigError(
            f"{where}: LoRA option {found[0]}={cut_to(repr(found[1]), 120)} is not supported"
        )
    init = data.get("init_lora_weights", True)
    if not plain_lora_init(init):
        raise ConfigError(
            f"{where}: init_lora_weights={cut_to(repr(init), 120)} is not plain LoRA's init (peft"
            " would rewrite"
            " the frozen base weights with it, and the merged export and GRPO's reference"
            " use the base as saved); use an adapter with init_lora_weights true, false or"
            " gaussian"
        )


def load_adapter_weights(model: torch.nn.Module, adapter: AdapterDir) -> None:
    """Copy the adapter's tensors into the LoRA layers PEFT injected into `model`: every
    stored tensor must name an adapter parameter of the model, with its shape and a
    floating-point dtype, and every adapter parameter must be stored; only then is a byte
    read (one tensor at a time). A tensor holding NaN/Inf is refused naming it, as a model
    dir's weights are (`trainer.finite_weights`): it trained to "step 1: gradient norm is
    nan", which blamed the step, not the adapter (and GRPO pushed NaN weights to its engine
    first)."""
    params = dict(model.named_parameters())
    where = f"{KEY}: {adapter.weights_file}"
    plan, unexpected = {}, []
    for name, entry in sorted(adapter.weights.tensors.items()):
        param = _parameter_of(name)
        if param not in params:
            unexpected.append(name)
            continue
        shape = tuple(params[param].shape)
        if entry.shape != shape:
            raise ConfigError(
                f"{where} [{name}]: shape {list(entry.shape)}, but the model's {param} is"
                f" {list(shape)} (an adapter of another rank or base model?)"
            )
        refuse_non_float(name, entry.dtype, adapter_weight(PEFT_KIND), where, ConfigError)
        plan[param] = name
    missing = [p for p in params if parse_adapter_key(p) is not None and p not in plan]
    if unexpected or missing:
        example = (unexpected or missing)[0]
        raise ConfigError(
            f"{KEY}: {adapter.path} does not fit this model ({len(unexpected)} "
            f"unexpected, {len(missing)} missing adapter weights, e.g. {example})"
        )
    with torch.no_grad():
        for param, name in plan.items():
            try:
                values = adapter.weights.read(name)
            except SafetensorsError as err:  # the file changed since its header was read
                raise ConfigError(f"{KEY}: {err}") from None
            found = count_nonfinite_tensor(values)
            if found:
                raise NonFiniteWeightsError(
                    f"{where} [{name}]: holds {found} NaN/Inf value(s) (a diverged run's"
                    " adapter?); training from it would only give NaN"
                )
            params[param].copy_(values)


def _parameter_of(stored: str) -> str | None:
    """The model parameter a saved PEFT adapter's tensor fills
    (`base_model.model.M.lora_A.weight` -> `M.lora_A.default.weight`); None for any other
    name (a DoRA magnitude, a bias, a name without PEFT's prefix)."""
    if not stored.startswith(PEFT_PREFIX) or not stored.endswith(".weight"):
        return None
    inner = f"{stored[len(PEFT_PREFIX) : -len('.weight')]}.{ADAPTER_NAME}.weight"
    key = parse_adapter_key(inner)
    return inner if key is not None and key.adapter == ADAPTER_NAME else None
