"""A Hugging Face config.json derived from what a Megatron checkpoint records of its model.

Megatron-LM keeps no Hugging Face config, but its fsdp_dtensor checkpoint holds `args`, the
run's argparse Namespace (None in an mcore import: no record), and Megatron-Bridge writes
`run_config.yaml` whose `model` section is the model's settings, flat (a model provider's
fields) or with the transformer's under a nested `transformer:` (its builder-backed
configs). Both describe the GPTModel exactly; `megatron_record` reads them, and this module
turns them into the config.json of the Hugging Face family with the same computation:

* RMSNorm, SwiGLU, rotary position embeddings on every dimension, no linear biases:
  Llama (`LlamaForCausalLM`), plus `add_qkv_bias` -> Qwen2, plus `qk_layernorm` -> Qwen3;
* a mixture-of-experts model (num_experts), every layer MoE with a softmax top-k router:
  with `qk_layernorm` Qwen3-MoE, with `add_qkv_bias` and a gated shared expert Qwen2-MoE,
  with neither Mixtral;
* Megatron-core's rope scaling (Llama 3.1's, linear position interpolation) as the
  config.json `rope_scaling` that computes it (`_rope_scaling`);
* anything else (LayerNorm, other MoE routers or layer patterns, learned or no position
  embeddings, GELU, partial or interleaved rotary, MLA, 1p norms, biases) has
  no such equivalent, and a config that approximates it would load and compute something
  else: refused, exit 1, naming the setting. The same table (`uncomputable`) holds a
  --hf-config to the record (`record_agreement`): no config.json makes the weights compute
  such a setting.

Settings a Megatron-LM Namespace always holds may still be missing from a hand-made one;
the essential ones (sizes, normalization, activation, position embedding, tying, vocab)
are then a usage error that asks for --hf-config, the others take Megatron-LM's argparse
defaults. Bridge's names are mapped to Megatron-LM's
(`megatron_record.megatron_settings_from_bridge`) so both go through the one mapping.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from mfsdp_ckpt.convert.export_errors import RefusedKind
from mfsdp_ckpt.convert.hf_config import MAX_EXPERTS, HFConfigError, check_geometry
from mfsdp_ckpt.errors import MfsdpFailedError, MfsdpUsageError
from mfsdp_ckpt.format.restricted_pickle import Placeholder, PlaceholderCall


class MegatronConfigError(MfsdpFailedError, ValueError):
    """The recorded model is one no Hugging Face family here computes (exit 1)."""


class MegatronKindRefused(MegatronConfigError, RefusedKind):
    """A kind of model the record states in well-formed values that no family here computes
    (LayerNorm, GELU, learned positions, a sigmoid router): raised once every value the
    derivation reads has passed its checks, so a damaged record is said as damage first.
    `config`: the config.json derived beside the refusal, for the checks that still hold
    the record to the weights (its layer count, its sizes); None where none was derived.
    `keeps_shapes`: whether every kind the record states keeps the tensors the family's
    table maps at the shapes `config` gives them (LayerNorm, GELU, a sigmoid router); False
    where one reshapes them (multi-latent attention, an attention output gate, latent
    experts) or is not known not to, so only the hidden size is held to the tensors."""

    def __init__(
        self, message: str, config: dict[str, Any] | None = None, keeps_shapes: bool = False
    ):
        super().__init__(message)
        self.config, self.keeps_shapes = config, keeps_shapes


class _Refusal(NamedTuple):
    """A kind of model the record states, found while its other values are still checked:
    export's line, and whether the kind keeps the tensors' shapes
    (`MegatronKindRefused.keeps_shapes`)."""

    line: str
    keeps_shapes: bool


# How export-hf and validate take a config of the user's own; the trainer names its key
# (model.hf_config=DIR): a message tells the user what their own command accepts.
HF_CONFIG_OPTION = "--hf-config"


class MegatronSettingsMissing(MfsdpUsageError, ValueError):
    """The record lacks a setting the config needs: a config of the user's own is needed
    (exit 2). `where` is the record's location, `record` names it (`args`,
    `run_config.yaml`), `missing` what it lacks; `config_option` how the command at hand
    takes that config."""

    def __init__(
        self, where: str, record: str, missing: list[str], config_option: str = HF_CONFIG_OPTION
    ):
        super().__init__(
            f"{where}: lacks {', '.join(missing)}, so no Hugging Face config can be derived;"
            f" pass {config_option} with the Hugging Face model dir the run started from"
        )
        self.where, self.record, self.missing = where, record, missing

    def lacking(self) -> str:
        """`WHERE lacks A, B`: what is missing, for a line that says its own remedy."""
        return f"{self.where} lacks {', '.join(self.missing)}"


@dataclass
class DerivedConfig:
    """config.json as data, and what the user should be told about how it was made.
    `source` names the record it came from; `tokenizer_model` is the tokenizer the run
    named (a path or Hub id outside the checkpoint: reported, never read)."""

    config: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    source: str = ""
    tokenizer_model: str | None = None
    vocab_recorded: bool = True  # False: vocab_size is the padded row count (none recorded)


# Megatron-core's Llama 3.1 rope scaling: the numbers RotaryEmbedding._apply_scaling fixes
# beside its factor, and the factor's default (Megatron-LM's --rope-scaling-factor, Bridge's)
LLAMA3_FIXED = {
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
LLAMA3_DEFAULT_FACTOR = 8.0

# Megatron-LM argparse defaults for settings a hand-made Namespace may leave out.
_DEFAULTS: dict[str, Any] = {
    "add_qkv_bias": False,
    "qk_layernorm": False,
    "group_query_attention": False,
    "num_experts": None,
    "rotary_percent": 1.0,
    "rotary_interleaved": False,
    "rotary_base": 10000,
    "norm_epsilon": 1e-5,
    "use_rope_scaling": False,
    "rope_scaling_factor": LLAMA3_DEFAULT_FACTOR,
    "rotary_seq_len_interpolation_factor": None,
    # Megatron-Bridge's provider names for rope scaling (Llama31ModelProvider records
    # rope_scaling and rope_scaling_factor; GPTModelProvider seq_len_interpolation_factor)
    "rope_scaling": False,
    "seq_len_interpolation_factor": None,
    "multi_latent_attention": False,
    "apply_layernorm_1p": False,
    "add_bias_linear": False,
    "kv_channels": None,
    "vocab_size": None,
    "padded_vocab_size": None,
    # Megatron-core TransformerConfig fields (defaults) that change what a dense GPT
    # computes without changing its weights' names or shapes
    "window_size": None,
    "softmax_type": "vanilla",
    "softmax_scale": None,
    "qk_l2_norm": False,
    "attention_output_gate": False,
    "no_rope_freq": None,
    "apply_residual_connection_post_layernorm": False,
    "glu_linear_offset": 0.0,
    "activation_func_clamp_value": None,
    "use_mup": False,
    "experimental_attention_variant": None,
    "linear_attention_freq": None,
    "enable_mhc_connections": False,
    # mixture-of-experts settings (Megatron-LM argparse / TransformerConfig defaults)
    "moe_router_topk": 2,
    "moe_ffn_hidden_size": None,
    "moe_router_pre_softmax": False,
    "moe_layer_freq": 1,
    "moe_router_load_balancing_type": "aux_loss",
    "moe_router_score_function": "softmax",
    "moe_router_enable_expert_bias": False,
    "moe_router_num_groups": None,
    "moe_router_group_topk": None,
    "moe_router_topk_limited_devices": None,
    "moe_router_topk_scaling_factor": None,
    "moe_router_force_biased": None,
    "moe_expert_capacity_factor": None,
    "moe_apply_probs_on_input": False,
    "moe_latent_size": None,
    "moe_mlp_glu_interleave_size": None,
    "moe_shared_expert_intermediate_size": None,
    "moe_shared_expert_gate": False,
}


@dataclass(frozen=True)
class _NoneOrOne:
    """A factor that changes nothing: none recorded, or 1 (Megatron-core divides rotary
    positions by the interpolation factor and multiplies routing weights by the top-k
    scaling factor)."""


_ESSENTIAL = (
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "ffn_hidden_size",
    "normalization",
    "swiglu",
    "position_embedding_type",
    "untie_embeddings_and_output_weights",
)


class Required(NamedTuple):
    """A recorded setting every family exported here needs at one value: `why` another value
    cannot be exported; `keeps_shapes`: whether another value leaves the tensors the family's
    table maps at the shapes the derived config gives them (its own tensors, a bias or a
    learned position embedding, have no place in the table; linear_fc1's rows are passed
    over), False where it reshapes them or is not known not to. (Rope scaling is no such
    setting: config.json states it, `_rope_scaling` derives it and `record_values` compares
    a --hf-config's with the record.)"""

    setting: str
    needed: Any
    why: str
    keeps_shapes: bool = False


_REQUIRED_VALUES: tuple[Required, ...] = (
    Required("normalization", "RMSNorm", "Llama, Qwen2 and Qwen3 use RMSNorm", keeps_shapes=True),
    Required("swiglu", True, "their MLP is SwiGLU", keeps_shapes=True),
    Required(
        "position_embedding_type", "rope", "they use rotary position embeddings", keeps_shapes=True
    ),
    Required(
        "rotary_percent", 1.0, "their rotary embedding covers the whole head", keeps_shapes=True
    ),
    Required(
        "rotary_interleaved",
        False,
        "their rotary embedding rotates halves, not pairs",
        keeps_shapes=True,
    ),
    Required("multi_latent_attention", False, "multi-latent attention is another architecture"),
    Required(
        "apply_layernorm_1p",
        False,
        "zero-centred norm weights are another parametrisation",
        keeps_shapes=True,
    ),
    Required("add_bias_linear", False, "their linear layers have no bias", keeps_shapes=True),
    # TE attends positions q-left..q, transformers' sliding_window W positions q-W+1..q, and
    # not alike in every version and kernel: no window is converted, rather than one off by one
    Required(
        "window_size",
        None,
        "windowed attention is not converted to a sliding_window",
        keeps_shapes=True,
    ),
    Required(
        "softmax_type", "vanilla", "their attention softmax is the plain one", keeps_shapes=True
    ),
    Required(
        "softmax_scale",
        None,
        "their attention scales scores by 1/sqrt(head_dim)",
        keeps_shapes=True,
    ),
    Required("qk_l2_norm", False, "they do not L2-normalise queries and keys", keeps_shapes=True),
    Required("attention_output_gate", False, "their attention output has no gate"),
    Required(
        "no_rope_freq", None, "every layer of theirs applies rotary embeddings", keeps_shapes=True
    ),
    Required(
        "apply_residual_connection_post_layernorm",
        False,
        "their residual connections carry the input before the norm",
        keeps_shapes=True,
    ),
    Required("glu_linear_offset", 0.0, "their SwiGLU adds no offset", keeps_shapes=True),
    Required(
        "activation_func_clamp_value", None, "their activation is not clamped", keeps_shapes=True
    ),
    Required(
        "use_mup",
        False,
        "muP multipliers scale embeddings, attention and logits",
        keeps_shapes=True,
    ),
    Required("experimental_attention_variant", None, "their attention is softmax attention"),
    Required("linear_attention_freq", None, "they have no linear-attention layers"),
    Required("enable_mhc_connections", False, "their residual stream is a single one"),
)


@dataclass(frozen=True)
class _OneOf:
    """A setting (or each of a list of them) that may take any of `values`."""

    values: tuple[str, ...]


# Load balancing that only adds a training loss; any other (sinkhorn, quantile_balancing)
# changes which experts a token reaches
_LOSS_ONLY_BALANCING = ("aux_loss", "seq_aux_loss", "global_aux_loss", "none")

# What a mixture-of-experts model needs on top, for Qwen3-MoE, Qwen2-MoE and Mixtral (a
# softmax top-k router over SwiGLU experts, outputs weighted after the activation).
_MOE_REQUIRED_VALUES: tuple[Required, ...] = (
    Required(
        "moe_router_score_function",
        "softmax",
        "their routers score experts by softmax",
        keeps_shapes=True,
    ),
    Required(
        "moe_router_enable_expert_bias",
        False,
        "an expert bias steers top-k selection (aux-loss-free balancing); their routers have none",
        keeps_shapes=True,
    ),
    Required(
        "moe_router_num_groups",
        None,
        "group-limited routing picks experts another way",
        keeps_shapes=True,
    ),
    Required(
        "moe_router_group_topk",
        None,
        "group-limited routing picks experts another way",
        keeps_shapes=True,
    ),
    Required(
        "moe_router_topk_limited_devices",
        None,
        "device-limited routing picks experts another way",
        keeps_shapes=True,
    ),
    Required(
        "moe_router_topk_scaling_factor",
        _NoneOrOne(),
        "their routing weights are not scaled",
        keeps_shapes=True,
    ),
    Required(
        "moe_router_force_biased", None, "their routers add no random bias", keeps_shapes=True
    ),
    Required(
        "moe_expert_capacity_factor",
        None,
        "they drop no tokens for expert capacity",
        keeps_shapes=True,
    ),
    Required(
        "moe_apply_probs_on_input",
        False,
        "they weight expert outputs, not inputs",
        keeps_shapes=True,
    ),
    Required("moe_latent_size", None, "their experts have no latent projection"),
    Required(
        "moe_mlp_glu_interleave_size",
        None,
        "their expert fc1 is [gate; up], not interleaved",
        keeps_shapes=True,
    ),
    Required(
        "moe_router_load_balancing_type",
        _OneOf(_LOSS_ONLY_BALANCING),
        f"it changes which experts a token reaches (exported: {', '.join(_LOSS_ONLY_BALANCING)})",
        keeps_shapes=True,
    ),
)
# A family that cannot compute a recorded setting the others can: (family, setting, value
# it cannot compute, why). Megatron-core's pre-softmax router (topk_routing_with_score_
# function) weighs each chosen expert by its softmax over all experts, unrenormalised, at
# any top-k: a top-1 token's expert by p < 1. Mixtral's router (MixtralTopKRouter) always
# divides the top-k weights by their sum (top-1: 1.0); Qwen2-/Qwen3-MoE do so only with
# norm_topk_prob, which the derivation sets false for pre-softmax. Only with every expert
# chosen do the weights sum to 1 either way (`_all_chosen`).
_FAMILY_CANNOT: tuple[tuple[str, str, Any, str], ...] = (
    (
        "mixtral",
        "moe_router_pre_softmax",
        True,
        "Mixtral renormalises the top-k routing weights to sum to 1, a top-1 expert's to"
        " 1.0; Megatron's pre-softmax router weighs each by its softmax over all experts",
    ),
)
# config.json keys the derivation sets from a recorded setting (the one named when a given
# config differs there): what `record_agreement` compares a --hf-config with
DERIVED_FROM = {
    "hidden_act": "swiglu",
    "norm_topk_prob": "moe_router_pre_softmax",
    "attention_bias": "add_qkv_bias",
    "mlp_bias": "add_bias_linear",
    "attention windows": "window_size",
}


def _refuse_uncomputable(
    values: dict[str, Any], where: _Where, family: str | None, refused: list[_Refusal]
) -> None:
    """The first setting `uncomputable` finds: added to `refused` (raised once the other
    values are checked) where the record states it as a value of its kind, else a damaged
    value, MegatronConfigError now."""
    found = uncomputable(values, where.names, family)
    if found:
        error = uncomputable_refusal(values, f"{where}: {found[0]}")
        if not isinstance(error, MegatronKindRefused):
            raise error
        refused.append(_Refusal(str(error), _keeps_shapes(values)))


def _keeps_shapes(settings: dict[str, Any]) -> bool:
    """Whether every setting `uncomputable` finds in `settings` keeps the tensors' shapes
    (`Required.keeps_shapes`; a family's router rule changes no shape)."""
    values = {**_DEFAULTS, **settings}
    rows = _REQUIRED_VALUES + (_MOE_REQUIRED_VALUES if _is_moe(values) else ())
    return all(
        row.keeps_shapes
        for row in rows
        if row.setting in values and not _is(values[row.setting], row.needed)
    )


def uncomputable_refusal(settings: dict[str, Any], message: str) -> MegatronConfigError:
    """The error for `message`, an `uncomputable` finding of `settings`: a kind refusal
    (MegatronKindRefused) where every setting held to one value states a value of its kind
    ("LayerNorm", False, 0.5), else damage (MegatronConfigError): a flag as text, a None
    where a name is needed."""
    values = {**_DEFAULTS, **settings}
    rows = _REQUIRED_VALUES + (_MOE_REQUIRED_VALUES if _is_moe(values) else ())
    damaged = any(
        row.setting in values and not _of_kind(values[row.setting], row.needed) for row in rows
    )
    return MegatronConfigError(message) if damaged else MegatronKindRefused(message)


def _of_kind(value: Any, needed: Any) -> bool:
    """Whether `value` is a value a setting held to `needed` takes (another kind of model,
    not damage): a flag for a flag, a name for a name, a finite number for a number; for a
    setting off by None, a name, a finite number or a list of them."""
    if isinstance(needed, bool):
        return isinstance(value, bool)
    if isinstance(needed, str):
        return isinstance(value, str) and bool(value)
    if isinstance(needed, _OneOf):
        kinds = value if isinstance(value, list) else [value]
        return bool(kinds) and all(isinstance(k, str) and k for k in kinds)
    if isinstance(needed, _NoneOrOne):
        return value is None or _finite(value)
    if isinstance(needed, float):
        return _finite(value)
    values = value if isinstance(value, (list, tuple)) else [value]  # needed None
    return value is None or (
        bool(values) and all(_finite(v) or (isinstance(v, str) and v) for v in values)
    )


def _finite(value: Any) -> bool:
    """A finite number, not a flag."""
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and _fits(value)
        and math.isfinite(value)
    )


def uncomputable(settings: dict[str, Any], names: dict[str, str], family: str | None) -> list[str]:
    """`key=value cannot be exported (why)` for each setting `settings` (a record's, under
    Megatron-LM's names; `names`: what the record calls a renamed one) holds that no family
    exported here computes (`_REQUIRED_VALUES`; an MoE model's `_MOE_REQUIRED_VALUES`), or
    that `family` (config.json's model_type, if known) cannot (`_FAMILY_CANNOT`). A setting
    a config.json can state is left to `record_values`; one not recorded takes Megatron-LM's
    default. The derivation refuses the first; a --hf-config is refused on any (the config
    cannot make the weights compute it)."""
    values = {**_DEFAULTS, **settings}
    moe = _is_moe(values)
    found = [
        f"{names.get(row.setting, row.setting)}={_name(values[row.setting])} cannot be exported"
        f" ({row.why})"
        for row in _REQUIRED_VALUES + (_MOE_REQUIRED_VALUES if moe else ())
        if row.setting in values and not _is(values[row.setting], row.needed)
    ]
    for cannot, key, value, why in _FAMILY_CANNOT:
        if family == cannot and moe and _is(values.get(key), value) and not _all_chosen(values):
            found.append(
                f"{names.get(key, key)}={_name(value)} cannot be exported as {family} ({why})"
            )
    return found


def _is_moe(values: dict[str, Any]) -> bool:
    """Whether the record's num_experts is a count above 0 (a mixture-of-experts model)."""
    experts = values.get("num_experts")
    return isinstance(experts, int) and not isinstance(experts, bool) and experts > 0


def _all_chosen(values: dict[str, Any]) -> bool:
    """Whether every token reaches every expert (top-k = num_experts): the routing weights
    are then the softmax over all experts, renormalised or not."""
    topk, experts = values.get("moe_router_topk"), values.get("num_experts")
    return isinstance(topk, int) and not isinstance(topk, bool) and topk == experts


MAX_SHOWN_CHARS = 60
MAX_SIZE = 1 << 40  # far above any layer, head or vocabulary count a model has


def _name(value: Any) -> str:
    """`value` for an error line, bounded whatever it is: a record may hold a YAML alias
    bomb or a pickle's shared lists (billions of elements, a few KB on disk) or a
    100,000-digit integer, whose repr would not finish or would raise; only scalars are
    shown, containers by their type."""
    if isinstance(value, Placeholder):
        return value.qualname[:MAX_SHOWN_CHARS]
    if isinstance(value, PlaceholderCall):
        return value.target.qualname[:MAX_SHOWN_CHARS]
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    if isinstance(value, str):
        return repr(value[:MAX_SHOWN_CHARS])
    return f"a {type(value).__name__}"


shown_value = _name  # a record's value as other modules' error lines show it


class _Where:
    """Where a record's values come from, and what that record calls each setting:
    Megatron-Bridge's run_config.yaml names some of them differently from Megatron-LM's
    args, and an error must name the key the user can find in the file. `config_option`:
    how the command at hand takes a config of the user's own, for the advice to give one."""

    def __init__(self, text: str, names: dict[str, str], config_option: str = HF_CONFIG_OPTION):
        self.text, self.names, self.config_option = text, names, config_option

    def __str__(self) -> str:
        return self.text

    def key(self, key: str) -> str:
        return self.names.get(key, key)


def _int(settings: dict, key: str, where: _Where) -> int:
    return _positive(settings[key], key, where)


def _recorded(value: Any, key: str, where: _Where) -> None:
    """A None is a setting the record leaves out, not a wrong value: say so, with no bound."""
    if value is None:
        raise MegatronConfigError(f"{where}: {where.key(key)} is not recorded (None)")


def _positive(value: Any, key: str, where: _Where) -> int:
    _recorded(value, key, where)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_SIZE:
        raise MegatronConfigError(
            f"{where}: {where.key(key)}={_name(value)} is not a positive integer"
            f" (at most {MAX_SIZE})"
        )
    return value


def _bool(settings: dict, key: str, where: _Where) -> bool:
    """A flag, as argparse and YAML record it: a string "false" is truthy in Python, so
    anything but a real bool would silently pick another family or tying."""
    value = settings[key]
    _recorded(value, key, where)
    if not isinstance(value, bool):
        raise MegatronConfigError(f"{where}: {where.key(key)}={_name(value)} is not true or false")
    return value


def _positive_float(settings: dict, key: str, where: _Where) -> float:
    """A finite positive number (norm epsilon, rotary base): json.dumps writes NaN and
    Infinity as tokens that are not JSON, and transformers would compute NaNs."""
    value = settings[key]
    _recorded(value, key, where)
    number = (
        float(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and _fits(value)
        else math.nan
    )
    if not (math.isfinite(number) and number > 0):
        raise MegatronConfigError(
            f"{where}: {where.key(key)}={_name(value)} is not a positive number"
        )
    return number


def _fits(value: int | float) -> bool:
    return not isinstance(value, int) or value.bit_length() <= 1000


def _is(value: Any, needed: Any) -> bool:
    """`value == needed` of the same kind: 1 is no flag and "1.0" no number."""
    if isinstance(needed, _NoneOrOne):
        return value is None or _is(value, 1.0)
    if isinstance(needed, _OneOf):
        kinds = value if isinstance(value, list) else [value]
        return bool(kinds) and all(isinstance(k, str) and k in needed.values for k in kinds)
    if isinstance(needed, bool):
        return value is needed
    if isinstance(needed, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool) and value == needed
    return isinstance(value, type(needed)) and value == needed


def _dtype(settings: dict) -> str:
    if settings.get("bf16") is True:
        return "bfloat16"
    if settings.get("fp16") is True:
        return "float16"
    params = settings.get("params_dtype")
    name = params.name if isinstance(params, Placeholder) and params.module == "torch" else None
    return {"bfloat16": "bfloat16", "float16": "float16", "half": "float16"}.get(
        name or "", "float32"
    )


def hf_config_from_megatron(
    settings: dict[str, Any],
    location: str,
    record: str = "args",
    names: dict[str, str] | None = None,
    config_option: str = HF_CONFIG_OPTION,
) -> DerivedConfig:
    """config.json for the model `settings` (Megatron-LM argument names) describes;
    `names` maps a Megatron-LM name to the record's own where they differ (errors say it);
    `config_option` is how the caller's command takes a config of the user's own, which
    the errors that ask for one name. A kind of model no family computes
    (MegatronKindRefused) is raised after every value is checked: a damaged record is
    refused as damage first, and validate never calls it a sound record of another kind."""
    where = _Where(location, names or {}, config_option)
    missing = [key for key in _ESSENTIAL if key not in settings]
    if "padded_vocab_size" not in settings and "vocab_size" not in settings:
        missing.append("padded_vocab_size")
    if missing:
        raise MegatronSettingsMissing(location, record, missing, config_option)
    values = {**_DEFAULTS, **settings}
    experts = values["num_experts"]
    if experts is not None and (
        isinstance(experts, bool) or not isinstance(experts, int) or experts < 0
    ):
        raise MegatronConfigError(
            f"{where}: {where.key('num_experts')}={_name(experts)} is not a count"
        )
    if experts is not None and experts > MAX_EXPERTS:
        raise MegatronConfigError(
            f"{where}: {where.key('num_experts')}={_name(experts)} is over the {MAX_EXPERTS}"
            " experts allowed"
        )
    moe = experts is not None and experts > 0
    refused: list[_Refusal] = []  # kinds no family computes: raised once every value is checked
    rope_scaling = _rope_scaling(values, where, refused)
    _refuse_uncomputable(values, where, None, refused)
    qkv_bias, qk_norm = _bool(values, "add_qkv_bias", where), _bool(values, "qk_layernorm", where)
    untied = _bool(values, "untie_embeddings_and_output_weights", where)
    if qkv_bias and qk_norm:
        line = f"{where}: add_qkv_bias with qk_layernorm: neither Qwen2 nor Qwen3 has both"
        refused.append(_Refusal(line, keeps_shapes=True))
    hidden, heads = _int(values, "hidden_size", where), _int(values, "num_attention_heads", where)
    gqa = _bool(values, "group_query_attention", where)
    groups = _int(values, "num_query_groups", where) if gqa else heads
    if heads % groups:
        raise MegatronConfigError(
            f"{where}: num_attention_heads={heads} is not a multiple of num_query_groups={groups}"
        )
    if values["kv_channels"] is not None:
        head_dim = _int(values, "kv_channels", where)
    elif hidden % heads:
        raise MegatronConfigError(
            f"{where}: hidden_size={hidden} is not a multiple of num_attention_heads={heads}"
            " and no kv_channels is recorded"
        )
    else:
        head_dim = hidden // heads
    family = "qwen2" if qkv_bias else "qwen3" if qk_norm else "llama"
    if moe:
        family = _moe_family(values, where, refused)
        _refuse_uncomputable(values, where, family, refused)
    vocab, notes = _vocab(values, where)
    positions, position_notes = _positions(values, where)
    if positions is None:
        raise MegatronSettingsMissing(location, record, ["max_position_embeddings"], config_option)
    notes += position_notes
    config: dict[str, Any] = {
        "architectures": [_ARCHITECTURES[family]],
        "model_type": family,
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": _int(values, "ffn_hidden_size", where),
        "num_hidden_layers": _int(values, "num_layers", where),
        "num_attention_heads": heads,
        "num_key_value_heads": groups,
        "head_dim": head_dim,
        "max_position_embeddings": _positive(positions, "max_position_embeddings", where),
        "rms_norm_eps": _positive_float(values, "norm_epsilon", where),
        "rope_theta": _positive_float(values, "rotary_base", where),
        "hidden_act": "silu",
        "tie_word_embeddings": not untied,
        "dtype": _dtype(values),
    }
    if family not in ("qwen2", "qwen2_moe", "mixtral"):  # whose models read no such switch
        config["attention_bias"] = False
    if family == "llama":
        config["mlp_bias"] = False
    if rope_scaling is not None:
        config["rope_scaling"] = rope_scaling
    if moe:
        config.update(_moe_config(values, where, family, config["num_hidden_layers"], refused))
    try:  # the bounds any config.json is held to (layers, experts in all): here the record's
        check_geometry(config, str(where))
    except HFConfigError as err:  # a record's value, not a config the user gave: exit 1
        raise MegatronConfigError(str(err)) from None
    if refused:  # a kind of model, the record otherwise sound: the first one found
        keeps = all(found.keeps_shapes for found in refused)
        raise MegatronKindRefused(refused[0].line, config, keeps_shapes=keeps)
    return DerivedConfig(config, notes, vocab_recorded=values["vocab_size"] is not None)


def _rope_scaling(
    values: dict[str, Any], where: _Where, refused: list[_Refusal]
) -> dict[str, Any] | None:
    """config.json's rope_scaling for the record's (None: it scales nothing). Megatron-core
    runs two (megatron/core/models/common/embeddings/rotary_pos_embedding.py): Llama 3.1's
    (`use_rope_scaling`, Bridge's `rope_scaling`, by `rope_scaling_factor`), whose other
    numbers RotaryEmbedding._apply_scaling fixes, transformers' llama3; and linear position
    interpolation (`rotary_seq_len_interpolation_factor`, Bridge's
    `seq_len_interpolation_factor`: positions divided by it), transformers' linear, which
    divides the frequencies instead. Both at once is no scaling a config.json states: added
    to `refused` where the factor is a number, None returned."""
    llama3 = _bool(values, "use_rope_scaling", where) or _bool(values, "rope_scaling", where)
    key = "rotary_seq_len_interpolation_factor"
    if values[key] is None:
        key = "seq_len_interpolation_factor"
    linear = not _is(values[key], _NoneOrOne())
    if llama3 and linear:
        _positive_float(values, key, where)  # a factor of no number is damage
        line = (
            f"{where}: Llama 3.1 rope scaling with {where.key(key)}={_name(values[key])}"
            " cannot be exported (no config.json states both, so none computes the model)"
        )
        refused.append(_Refusal(line, keeps_shapes=True))
        return None
    if linear:
        return {"rope_type": "linear", "factor": _positive_float(values, key, where)}
    if llama3:
        factor = _positive_float(values, "rope_scaling_factor", where)
        return {"rope_type": "llama3", "factor": factor, **LLAMA3_FIXED}
    return None


_ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM",
    "mixtral": "MixtralForCausalLM",
}


def _moe_family(values: dict, where: _Where, refused: list[_Refusal]) -> str:
    """The MoE family with this attention and shared expert: Qwen3-MoE normalises q and k,
    Qwen2-MoE has q/k/v biases and a sigmoid-gated shared expert, Mixtral neither; none of
    them has both, or a shared expert without a gate: such a record is added to `refused`
    (the family returned then only lets the other values be checked)."""
    experts = f"{where.key('num_experts')}={_name(values['num_experts'])} (mixture-of-experts)"
    shared = values["moe_shared_expert_intermediate_size"] is not None
    qkv_bias, qk_norm = values["add_qkv_bias"], values["qk_layernorm"]
    if shared:
        gate = _bool(values, "moe_shared_expert_gate", where)
        wrong = [
            (key, value)
            for key, value, needed in (
                ("add_qkv_bias", qkv_bias, True),
                ("qk_layernorm", qk_norm, False),
                ("moe_shared_expert_gate", gate, True),
            )
            if value is not needed
        ]
        if wrong:
            key, value = wrong[0]
            line = (
                f"{where}: {experts} with a shared expert"
                f" ({where.key('moe_shared_expert_intermediate_size')}) and"
                f" {where.key(key)}={_name(value)}: Qwen2-MoE, the MoE family with a shared"
                " expert, has q/k/v biases, no q/k layernorm and a gated shared expert"
            )
            refused.append(_Refusal(line, keeps_shapes=True))
        return "qwen2_moe"
    if qkv_bias:
        line = (
            f"{where}: {experts} with {where.key('add_qkv_bias')}=True and no shared expert:"
            " Qwen2-MoE, the MoE family with q/k/v biases, has a shared expert"
        )
        refused.append(_Refusal(line, keeps_shapes=True))
    return "qwen3_moe" if qk_norm else "mixtral"


def _moe_config(
    values: dict, where: _Where, family: str, layers: int, refused: list[_Refusal]
) -> dict[str, Any]:
    """The MoE family's config.json keys for the recorded experts and router. Megatron's
    default softmax after top-k (moe_router_pre_softmax false) is softmax over all experts
    then renormalised over the top k (norm_topk_prob true, Mixtral always); pre-softmax is
    the same without the renormalisation."""
    experts = _int(values, "num_experts", where)
    topk = _int(values, "moe_router_topk", where)
    if topk > experts:
        raise MegatronConfigError(
            f"{where}: {where.key('moe_router_topk')}={topk} is more than"
            f" {where.key('num_experts')}={experts}"
        )
    freq = values["moe_layer_freq"]
    every_layer = [1] * layers
    if not (
        _is(freq, 1)
        or (isinstance(freq, list) and all(_is(f, 1) for f in freq) and freq == every_layer)
    ):
        shown = (
            str(freq)
            if isinstance(freq, list)
            and len(freq) <= 16
            and all(_is(f, 1) or _is(f, 0) for f in freq)
            else _name(freq)
        )
        dense = (
            f" ({[layer for layer, f in enumerate(freq) if _is(f, 0)]})"
            if isinstance(freq, list) and shown == str(freq)
            else ""
        )
        route = (  # Mixtral's transformers model has no dense layers
            ""
            if family == "mixtral"
            else f"; --hf-config with a {family} config.json whose mlp_only_layers lists the"
            f" dense layers{dense} exports it"
        )
        line = (
            f"{where}: {where.key('moe_layer_freq')}={shown} mixes dense and MoE layers;"
            f" only every layer MoE (1) is derived from the record{route}"
        )
        if not _a_layer_pattern(freq, layers):  # no pattern Megatron-core reads: damage
            raise MegatronConfigError(line)
        refused.append(_Refusal(line, keeps_shapes=True))
    expert_ffn = _int(
        values,
        "moe_ffn_hidden_size" if values["moe_ffn_hidden_size"] is not None else "ffn_hidden_size",
        where,
    )
    renormalise = not _bool(values, "moe_router_pre_softmax", where)
    if family == "mixtral":  # its intermediate_size is each expert's
        return {
            "intermediate_size": expert_ffn,
            "num_local_experts": experts,
            "num_experts_per_tok": topk,
            "sliding_window": None,
            "router_jitter_noise": 0.0,
        }
    config: dict[str, Any] = {
        "moe_intermediate_size": expert_ffn,
        "num_experts": experts,
        "num_experts_per_tok": topk,
        "norm_topk_prob": renormalise,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "use_sliding_window": False,
        "sliding_window": None,
    }
    if family == "qwen2_moe":
        config["shared_expert_intermediate_size"] = _int(
            values, "moe_shared_expert_intermediate_size", where
        )
        config["qkv_bias"] = True
    return config


def _a_layer_pattern(freq: Any, layers: int) -> bool:
    """Whether `freq` is a moe_layer_freq Megatron-core reads for `layers` layers: every
    N-th layer MoE (1 <= N <= layers), or a 0/1 per layer."""
    if isinstance(freq, list):
        return len(freq) == layers and all(_is(f, 1) or _is(f, 0) for f in freq)
    return isinstance(freq, int) and not isinstance(freq, bool) and 1 <= freq <= layers


def _positions(values: dict, where: _Where) -> tuple[Any, list[str]]:
    """max_position_embeddings as recorded, else the run's seq_length (Megatron-Bridge
    records no other), with a note: a recipe sets seq_length to the length it trains at,
    which may be below what the model was built for, and config.json then says so; None
    when neither is recorded."""
    recorded = values.get("max_position_embeddings")
    if recorded:
        return recorded, []
    positions = values.get("seq_length")
    if positions is None:
        return None, []
    return positions, [
        f"max_position_embeddings {_name(positions)} is {where}'s"
        f" {where.key('seq_length')}, the sequence length the run trained at (a recipe may"
        f" set it below the length the model was built for); pass {where.config_option} with"
        " the model's own config.json to override it"
    ]


def _vocab(values: dict, where: _Where) -> tuple[int, list[str]]:
    """The tokenizer's vocabulary when recorded (export drops Megatron's padding rows),
    else the padded size: then every stored row is kept, and the note says so."""
    if values["vocab_size"] is not None:
        return _int(values, "vocab_size", where), []
    rows = _int(values, "padded_vocab_size", where)
    return rows, [
        f"{where} records padded_vocab_size={rows} but no vocab_size: all {rows} rows are"
        " kept, Megatron's vocabulary padding included (rows past the tokenizer's"
        " vocabulary belong to no token)"
    ]


__all__ = [
    "DERIVED_FROM",
    "HF_CONFIG_OPTION",
    "LLAMA3_DEFAULT_FACTOR",
    "LLAMA3_FIXED",
    "DerivedConfig",
    "MegatronConfigError",
    "MegatronKindRefused",
    "MegatronSettingsMissing",
    "Required",
    "hf_config_from_megatron",
    "shown_value",
    "uncomputable",
    "uncomputable_refusal",
]
