"""A PEFT adapter dir's adapter_config.json (`model.lora_adapter_path`), checked as plain JSON.

Every field LoraConfig is built from is checked here against what it must be, without torch
or peft, so the launching process (`mfsdp config check` and train alike) refuses what a rank
would: `r: "4"` or a rank_pattern rank of 2**40 passed `config check` and were refused by
train only after the models' imports, some 40 s later. The rank checks it again as it reads
the whole dir (`trainer.lora_adapter_dir.read_adapter_dir`), with the weights and the checks
that need the installed peft. Each refusal is one line naming model.lora_adapter_path, the
file and the key (exit 2).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.format.lora_fields import LoraFieldError, lora_settings
from mfsdp_ckpt.lora import ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE, MAX_ADAPTER_CONFIG_BYTES
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.unique_json import read_json_file
from trainer.config import ConfigError, ModelConfig
from trainer.lora_adapter_hints import KEY, pickle_hint, where_the_adapter_is


def check_adapter_config(cfg: ModelConfig) -> None:
    """The launching process's check of `model.lora_adapter_path`, where one is set: its
    files are there and adapter_config.json's fields are what LoraConfig needs."""
    if cfg.lora_adapter_path is not None:
        read_adapter_config(Path(cfg.lora_adapter_path))


def read_adapter_config(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """adapter_config.json's data in the adapter dir `path`, and the USED fields it sets,
    each checked (`_checked_settings`); ConfigError naming the file and the key otherwise.
    Both of the dir's files must be regular files inside it (`_check_file`)."""
    config_file = path / ADAPTER_CONFIG_FILE
    root = safe_files.model_dir_root(path)
    for needed in (config_file, path / ADAPTER_WEIGHTS_FILE):
        _check_file(needed, root)
    try:
        data = read_json_file(config_file, MAX_ADAPTER_CONFIG_BYTES, ConfigError, root)
    except ConfigError as err:
        raise ConfigError(f"{KEY}: {err}") from None
    if not isinstance(data, dict) or data.get("peft_type") != "LORA":
        raise ConfigError(f"{KEY}: {config_file} is not a LoRA adapter config")
    return data, _checked_settings(data, config_file)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _names(value: Any) -> bool:
    """A name or regex, or a non-empty list of names."""
    if isinstance(value, str):
        return bool(value)
    return isinstance(value, list) and bool(value) and all(isinstance(n, str) and n for n in value)


def _no_names(value: Any) -> bool:
    """None, or module names or a regex, for a field that may leave nothing out: [] is "no
    module" to PEFT (and verl's Megatron default for lora.exclude_modules), as null is."""
    return value is None or value == [] or _names(value)


def _layers(value: Any) -> bool:
    if value is None or (_count(value) and value >= 0):
        return True
    return isinstance(value, list) and all(_count(n) and n >= 0 for n in value)


def _dropout(value: Any) -> bool:
    """A probability nn.Dropout takes and that leaves something to train: 1 drops every
    input of the adapter (NaN fails both comparisons)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1


# Fields LoraConfig is built from that are checked here, with what a value must be
CHECKED: dict[str, tuple[Callable[[Any], bool], str]] = {
    "target_modules": (_names, "module names (a list of them, all-linear or a regex)"),
    "exclude_modules": (_no_names, "null, [], module names or a regex"),
    "layers_to_transform": (_layers, "null, a layer index or a list of them"),
    "task_type": (lambda v: v in (None, "CAUSAL_LM"), "CAUSAL_LM (a causal LM's adapter)"),
    # trains as saved, as verl's PeftModel.from_pretrained(..., is_trainable=True) keeps it
    "lora_dropout": (_dropout, "a dropout probability, a number in [0, 1)"),
}
# Every field LoraConfig is built from: the others are checked where every LoRA config is
# (`lora_settings`), layers_pattern by `check_layers_pattern`
USED = frozenset(
    {"r", "lora_alpha", "use_rslora", "init_lora_weights", "layers_pattern"} | set(CHECKED)
)
# Fields an adapter_config.json must have, with why: PEFT would fill an absent one with its
# default (`peft_default`), which is what the adapter was trained with only by chance.
# Absent, each was told "'lora_alpha' is None", as if the file said null.
REQUIRED = {
    "r": "PEFT would assume {default}; set it to the adapter's rank, the first dimension of its"
    " lora_A tensors",
    "lora_alpha": "PEFT would assume {default}; set it to the alpha the adapter was trained with",
    "target_modules": "PEFT would pick the model type's default modules; set it to the modules"
    " the adapter was trained on",
}


def _checked_settings(data: dict[str, Any], config_file: Path) -> dict[str, Any]:
    """The USED fields `data` sets, each of the type LoraConfig needs, and plain LoRA's
    (`lora_settings`, as a LoRA checkpoint's manifest is read)."""
    where = f"{KEY}: {config_file}"
    absent = next((name for name in REQUIRED if name not in data), None)
    if absent is not None:
        why = REQUIRED[absent].format(default=peft_default(absent))
        raise ConfigError(f"{where}: has no {absent!r} ({why})")
    try:
        lora_settings(data)
    except LoraFieldError as err:
        raise ConfigError(f"{where}: {err}") from None
    for name, (fits, wanted) in CHECKED.items():
        if name in data and not fits(data[name]):
            raise ConfigError(f"{where}: {name} is {cut_to(repr(data[name]), 80)}, not {wanted}")
    settings = {name: data[name] for name in USED if name in data}
    check_layers_pattern(settings.get("layers_pattern"), f"{where}: layers_pattern")
    if isinstance(settings["target_modules"], str) and settings.get("layers_to_transform"):
        raise ConfigError(
            f"{where}: layers_to_transform with a regex target_modules (PEFT refuses it too);"
            " the regex picks the layers"
        )
    return settings


def peft_default(name: str) -> Any:
    """The value PEFT's LoraConfig gives field `name` when an adapter_config.json omits it."""
    from peft import LoraConfig

    return next(field.default for field in fields(LoraConfig) if field.name == name)


def check_layers_pattern(value: Any, key: str) -> None:
    """layers_pattern is None, a name or a list of names (`layers`): PEFT pastes each into
    a regex, so anything but a plain name would be a pattern it matches unbounded."""
    names = [value] if isinstance(value, str) else value
    if value is None or (isinstance(names, list) and all(_plain_name(n) for n in names)):
        return
    raise ConfigError(
        f"{key}: {cut_to(repr(value), 120)} is not a module name or a list of them (such as"
        " 'layers')"
    )


def _plain_name(name: Any) -> bool:
    return isinstance(name, str) and name.isidentifier()


def _check_file(file: Path, root: safe_files.ModelDirRoot) -> None:
    """Each file read from the dir under one rule, that of a model dir's files
    (`safe_files.model_dir_root`): a regular file inside the dir, or in the Hugging Face
    cache its snapshot links into. A FIFO, a device, a directory or a link leading out was
    told "is missing" (`is_file` is false for each), and the config was read through a link
    to anywhere: a config from another folder trained silently with its own alpha. Only a
    file that is not there at all is missing; an adapter saved as a pickle says so."""
    if not os.path.lexists(file):
        also = (
            pickle_hint(file.parent)
            if file.name == ADAPTER_WEIGHTS_FILE
            else where_the_adapter_is(file.parent)
        )
        raise ConfigError(
            f"{KEY}: {file} is missing "
            f"(a PEFT adapter dir has {ADAPTER_CONFIG_FILE} and {ADAPTER_WEIGHTS_FILE}){also}"
        )
    try:
        safe_files.regular_file(file, root, f"the adapter dir {file.parent}")
    except CheckpointFileError as err:
        raise ConfigError(f"{KEY}: {err}") from None
