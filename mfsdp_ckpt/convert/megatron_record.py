"""Reading what a Megatron checkpoint records of its model: Megatron-LM's `args`, Bridge's
run_config.yaml, verl's transformer_config.json (`verl_record`).

Megatron-LM's fsdp_dtensor checkpoint holds `args`, the run's argparse Namespace (None in
an mcore import: no record), and Megatron-Bridge writes `run_config.yaml`, whose `model`
section is the model's settings, flat (a model provider's fields) or with the
transformer's under a nested `transformer:` (its builder-backed configs). Both are files a
checkpoint brings, so both are read bounded (the restricted unpickler, bounded YAML) and
what they cannot be read as is a damaged checkpoint. The settings come out under
Megatron-LM's argument names, with the names the record itself uses for errors, and
`megatron_config` derives the Hugging Face config from them: reading a record and
deriving from it are apart so that checks needing only the record (the recorded layout,
the optimizer, LoRA's alpha) read it without the derivation's rules.
"""

from __future__ import annotations

import copy
import functools
import os
from dataclasses import dataclass
from typing import Any

from mfsdp_ckpt.convert.megatron_config import (
    HF_CONFIG_OPTION,
    DerivedConfig,
    MegatronSettingsMissing,
    hf_config_from_megatron,
    shown_value,
)
from mfsdp_ckpt.convert.verl_record import (
    VERL_TRANSFORMER_CONFIG,
    known_fields,
    read_transformer_config,
    transformer_config_file,
)
from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.format.restricted_pickle import Placeholder
from mfsdp_ckpt.format.saved_objects import MAX_SAVED_OBJECT_BYTES, load_namespace
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.blob_decode import decode_blob
from mfsdp_ckpt.storage.bounded_yaml import ExpansionBudget, parse_yaml
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.reader import CheckpointReader

# Megatron-core TransformerConfig field -> Megatron-LM argument, where the names differ.
# Megatron-Bridge's provider records the fields; Megatron-LM's args hold them too since its
# arguments are generated from TransformerConfig (arguments.py, 639c08ab, 2026-01-30:
# --norm-epsilon became --layernorm-epsilon, --apply-layernorm-1p
# --layernorm-zero-centered-gamma).
_CONFIG_FIELD_RENAMES = {
    "layernorm_epsilon": "norm_epsilon",
    "layernorm_zero_centered_gamma": "apply_layernorm_1p",
}
# Megatron-Bridge provider setting -> Megatron-LM argument, where the names differ.
_BRIDGE_RENAMES = {**_CONFIG_FIELD_RENAMES, "num_moe_experts": "num_experts"}
# What an error about a derived Megatron-LM setting names in run_config.yaml.
_BRIDGE_NAMES = {
    **{megatron: bridge for bridge, megatron in _BRIDGE_RENAMES.items()},
    "swiglu": "gated_linear_unit/activation_func",
    "untie_embeddings_and_output_weights": "share_embeddings_and_output_weights (inverted)",
}


# How Megatron-Bridge names F.silu: a model provider's YAML serialiser writes the function
# (`{_target_: torch.nn.functional.silu}`), a builder-backed config its short name from
# Bridge's activation map (`utils/activation_map.py`: "silu"; the qualified name is an alias).
_SILU_NAMES = ("silu", "torch.nn.functional.silu")
# The nested section of a builder-backed model config (BridgeGPTModelConfig.as_dict).
BRIDGE_TRANSFORMER_SECTION = "transformer"


def bridge_model_fields(model: dict[str, Any], where: str) -> tuple[dict[str, Any], set[str]]:
    """run_config.yaml's model section as one mapping, and the keys that came from its nested
    `transformer:`. Megatron-Bridge writes the section two ways: a model provider's fields
    flat (GPTModelProvider), or a builder-backed config's (BridgeGPTModelConfig: what
    AutoBridge's `get_model_config()` and the recipes built on it give) as Megatron-LM's
    `ModelConfig.as_dict` does, the GPT build fields (vocab, seq_length, tying, rotary) flat
    and the TransformerConfig's (sizes, heads, norm, activation, MoE) under `transformer:`.
    Each field has one owner there, so a key set in both to different values is refused
    (compared as scalars, or as the same object: a YAML alias bomb is never walked)."""
    nested = model.get(BRIDGE_TRANSFORMER_SECTION)
    if nested is None:
        return model, set()
    if not isinstance(nested, dict):
        raise CheckpointFormatError(
            f"{where}: {BRIDGE_TRANSFORMER_SECTION} is {shown_value(nested)}, not a mapping"
        )
    outer = {k: v for k, v in model.items() if k != BRIDGE_TRANSFORMER_SECTION}
    inner = {k: v for k, v in nested.items() if isinstance(k, str) and not k.startswith("_")}
    both = sorted(k for k in inner if k in outer and not _same(outer[k], inner[k]))
    if both:
        raise CheckpointFormatError(
            f"{where}: {both[0]} is {shown_value(outer[both[0]])} here and"
            f" {shown_value(inner[both[0]])} in {BRIDGE_TRANSFORMER_SECTION};"
            " a setting has one place"
        )
    return {**outer, **inner}, set(inner)


def _same(one: Any, other: Any) -> bool:
    """The same value without walking a container: one object, or equal scalars."""
    scalars = (type(None), bool, int, float, str)
    if one is other:
        return True
    return type(one) is type(other) and isinstance(one, scalars) and one == other


def megatron_settings_from_bridge(
    model: dict[str, Any], where: str
) -> tuple[dict[str, Any], dict[str, str]]:
    """A Megatron-Bridge `run_config.yaml` model section (flat or nested,
    `bridge_model_fields`) under Megatron-LM's argument names, and for errors the name each
    setting has in the file where it differs (`transformer.num_layers` when nested).

    Bridge records `gated_linear_unit` and `activation_func` (`_SILU_NAMES`) where
    Megatron-LM has `swiglu`, and `share_embeddings_and_output_weights` where it has the
    inverse; `num_query_groups` None means plain multi-head attention. Its `vocab_size` is
    the tokenizer's; the rows are padded when `should_pad_vocab`, which export explains as
    Megatron's padding. A gated unit whose activation is not recorded (a serialiser that
    skips callables) leaves `swiglu` unknown: missing, not refused as another activation."""
    fields, nested = bridge_model_fields(model, where)
    settings = {_BRIDGE_RENAMES.get(k, k): v for k, v in fields.items() if isinstance(k, str)}
    names = dict(_BRIDGE_NAMES)
    for key in nested:
        names[_BRIDGE_RENAMES.get(key, key)] = f"{BRIDGE_TRANSFORMER_SECTION}.{key}"
    if "gated_linear_unit" in nested:
        names["swiglu"] = f"{BRIDGE_TRANSFORMER_SECTION}.{names['swiglu']}"
    if "gated_linear_unit" in fields and fields.get("activation_func") is not None:
        gated = fields["gated_linear_unit"]
        activation = fields["activation_func"]
        target = activation.get("_target_") if isinstance(activation, dict) else activation
        # the name is compared, never imported: only torch's silu makes a SwiGLU
        settings["swiglu"] = (
            gated if not isinstance(gated, bool) else gated and target in _SILU_NAMES
        )
    if "share_embeddings_and_output_weights" in fields:
        shared = fields["share_embeddings_and_output_weights"]
        settings["untie_embeddings_and_output_weights"] = (
            not shared if isinstance(shared, bool) else shared
        )
    settings["group_query_attention"] = fields.get("num_query_groups") is not None
    dtype = fields.get("params_dtype")
    target = dtype.get("_target_") if isinstance(dtype, dict) else dtype
    if isinstance(target, str) and target.startswith("torch."):
        settings["params_dtype"] = Placeholder("torch", target.removeprefix("torch."))
    settings.pop("padded_vocab_size", None)
    return settings, names


def megatron_settings_from_verl(
    fields: dict[str, Any], where: str
) -> tuple[dict[str, Any], dict[str, str]]:
    """verl's transformer_config.json (a TransformerConfig, or Bridge's provider, as JSON)
    under Megatron-LM's argument names: the provider's fields as run_config.yaml holds
    them, once what verl wrote as an object's text is taken for what it says
    (`verl_record.known_fields`)."""
    return megatron_settings_from_bridge(known_fields(fields), where)


def megatron_settings_from_args(fields: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """Megatron-LM's `args` under the argument names the derivation reads, and for errors
    the name each renamed setting has in these args: newer args carry TransformerConfig's
    names (`layernorm_epsilon`, `layernorm_zero_centered_gamma`) instead of the older
    arguments', which a checkpoint from before the change still holds."""
    settings, names = dict(fields), {}
    for config_name, argument in _CONFIG_FIELD_RENAMES.items():
        if config_name in fields and argument not in fields:
            settings[argument] = fields[config_name]
            names[argument] = config_name
    return settings, names


MAX_RUN_CONFIG_BYTES = 4 << 20  # a run_config.yaml is tens of KB
ARGS_KEY = "args"


def has_recorded_config(paths: layout.CheckpointPaths, reader: CheckpointReader) -> bool:
    """Whether the checkpoint records its model (Bridge's run_config.yaml, verl's
    transformer_config.json, Megatron's args; `args` holding None, as an mcore import writes
    it, records nothing). A record that cannot be read counts: `recorded_config` names what
    is wrong with it."""
    if paths.run_config is not None or transformer_config_file(paths) is not None:
        return True
    if ARGS_KEY not in reader.objects:
        return False
    try:
        return read_args(reader) is not None
    except (CheckpointFormatError, CheckpointFileError):
        return True


@dataclass
class RecordedSettings:
    """A checkpoint's record of its model under Megatron-LM's argument names: `settings`,
    where they are (`where`), which record (`record`: `args`, `run_config.yaml`), the names
    the record gives renamed settings (`names`, for errors), the tokenizer it names."""

    settings: dict[str, Any]
    where: str
    record: str
    names: dict[str, str]
    tokenizer_model: str | None


def recorded_settings(
    paths: layout.CheckpointPaths | None,
    reader: CheckpointReader,
    config_option: str = HF_CONFIG_OPTION,
) -> RecordedSettings | None:
    """Megatron-Bridge's run_config.yaml model section, else verl's transformer_config.json,
    else Megatron-LM's `args` (the only one read through a URL, `paths` None: it is in the
    DCP); None when it records none (or `args` holds None). Raises CheckpointFormatError /
    CheckpointFileError (an unreadable record), MegatronSettingsMissing (run_config.yaml
    without `model`, asking for `config_option`)."""
    if paths is not None and paths.run_config is not None:
        model, tokenizer = _bridge_sections(paths.run_config, paths.root, config_option)
        where = f"{paths.run_config} model"
        settings, names = megatron_settings_from_bridge(model, where)
        return RecordedSettings(settings, where, layout.BRIDGE_RUN_CONFIG_FILE, names, tokenizer)
    verl = read_transformer_config(paths) if paths is not None else None
    if verl is not None:
        where = str(verl.file)
        settings, names = megatron_settings_from_verl(verl.fields, where)
        return RecordedSettings(settings, where, VERL_TRANSFORMER_CONFIG, names, None)
    if ARGS_KEY not in reader.objects:
        return None
    fields = read_args(reader)
    if fields is None:
        return None
    settings, names = megatron_settings_from_args(fields)
    tokenizer = _tokenizer_name(fields.get("tokenizer_model"))
    return RecordedSettings(settings, f"{reader.root} [{ARGS_KEY}]", ARGS_KEY, names, tokenizer)


def recorded_config(
    paths: layout.CheckpointPaths | None,
    reader: CheckpointReader,
    config_option: str = HF_CONFIG_OPTION,
) -> DerivedConfig | None:
    """The HF config the checkpoint's own record implies (`recorded_settings`); None when it
    records none. Raises MegatronConfigError (a model no family here computes),
    MegatronSettingsMissing (a record without the sizes), CheckpointFormatError /
    CheckpointFileError (an unreadable record). Where the remedy is a config of the user's
    own, errors and notes name `config_option`, how the caller's command takes one."""
    recorded = recorded_settings(paths, reader, config_option)
    if recorded is None:
        return None
    derived = hf_config_from_megatron(
        recorded.settings, recorded.where, recorded.record, recorded.names, config_option
    )
    derived.tokenizer_model = recorded.tokenizer_model
    derived.source = recorded.where
    return derived


def read_args(reader: CheckpointReader) -> dict[str, Any] | None:
    """Megatron-LM's `args` Namespace fields, read bounded through the restricted unpickler;
    None when the entry holds None: no record of the run's arguments (an mcore import
    writes it so Megatron-LM's first read, which asks for `args`, finds the key; Megatron-LM
    and Megatron-Bridge read it as no record too). Read once per reader (`reader.decoded`),
    however many checks of the command ask; each gets its own copy of the fields."""
    fields = reader.decoded.once(ARGS_KEY, lambda: _args_fields(reader))
    return None if fields is None else dict(fields)


def _args_fields(reader: CheckpointReader) -> dict[str, Any] | None:
    entry = reader.objects[ARGS_KEY]
    where = f"{reader.root} [{ARGS_KEY}]"
    if entry.file is None:
        raise CheckpointFormatError(f"{where}: no storage entry")
    if entry.length > MAX_SAVED_OBJECT_BYTES:
        raise CheckpointFormatError(
            f"{where}: {entry.length} bytes, more than the {MAX_SAVED_OBJECT_BYTES} read here"
        )
    raw = reader.store.read_range(entry.file, entry.file_offset, entry.length)
    data = decode_blob(raw, entry.transforms, where, MAX_SAVED_OBJECT_BYTES).getvalue()
    return load_namespace(data, where)


def _bridge_sections(
    run_config: str | os.PathLike, root: str | os.PathLike, config_option: str
) -> tuple[dict[str, Any], str | None]:
    """run_config.yaml's `model` section and the tokenizer it names."""
    data = run_config_data(run_config, root)
    model = data.get("model")
    if model is None:
        raise MegatronSettingsMissing(
            str(run_config), layout.BRIDGE_RUN_CONFIG_FILE, ["model"], config_option
        )
    if not isinstance(model, dict):
        raise CheckpointFormatError(f"{run_config}: model is {shown_value(model)}, not a mapping")
    tokenizer = data.get("tokenizer")
    return model, _tokenizer_name(
        tokenizer.get("tokenizer_model") if isinstance(tokenizer, dict) else None
    )


def run_config_data(run_config: str | os.PathLike, root: str | os.PathLike) -> dict[str, Any]:
    """run_config.yaml's sections, from a regular file in the checkpoint, read as plain data
    under the bounds every YAML here is read with (`bounded_yaml`: no tags that build
    objects, no alias bomb, no 5,000-digit integer, no traceback from `!!int ""`), as much
    text as walked as the file may hold. What it refuses is a damaged checkpoint:
    CheckpointFormatError in one line naming the file (exit 1)."""
    text = safe_files.read_text(run_config, MAX_RUN_CONFIG_BYTES, root=root)
    return copy.deepcopy(_parsed_run_config(str(run_config), text))


@functools.lru_cache(maxsize=2)
def _parsed_run_config(where: str, text: str) -> dict[str, Any]:
    """`run_config_data`'s parse of `text`, once per text: one validate reads the record
    from five checks, and a 60,000-path data blend took seconds to parse each time. Keyed
    by the text read, so a file that changed is parsed again; callers get a copy."""
    # every value takes two bytes at least (a character and a separator): no file within the
    # byte cap is refused for the values it holds (a data blend of 60,000 shard paths)
    budget = ExpansionBudget(max_nodes=MAX_RUN_CONFIG_BYTES // 2, max_chars=MAX_RUN_CONFIG_BYTES)
    data = parse_yaml(text, where, CheckpointFormatError, budget)
    if not isinstance(data, dict):
        raise CheckpointFormatError(
            f"{where}: holds {shown_value(data)}, not a mapping of sections"
        )
    return data


MAX_TOKENIZER_NAME_CHARS = 1024


def _tokenizer_name(value: Any) -> str | None:
    """The tokenizer path or Hub id the run named, only as a note can show it in one line:
    a string, printable, of path length; anything else is not reported."""
    if isinstance(value, str) and len(value) <= MAX_TOKENIZER_NAME_CHARS and value.isprintable():
        return value
    return None


__all__ = [
    "ARGS_KEY",
    "BRIDGE_TRANSFORMER_SECTION",
    "RecordedSettings",
    "bridge_model_fields",
    "has_recorded_config",
    "megatron_settings_from_args",
    "megatron_settings_from_bridge",
    "megatron_settings_from_verl",
    "read_args",
    "recorded_config",
    "recorded_settings",
    "run_config_data",
]
