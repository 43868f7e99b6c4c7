"""config.json settings that change what a model computes from the same weights.

Two configs with every shape alike can still describe different models: another activation,
another RoPE base (Qwen2.5-7B's config given for a Qwen2.5-Math-7B run, which has the same
shapes and another rope_theta), another norm epsilon. An export under a `--hf-config` that
differs there from the checkpoint's own config.json writes the trained weights under a model
they were not trained as, and nothing downstream notices.

Only keys both configs state, as values of one kind, are compared: a key left out takes a
default this module does not know, and a value of another kind (`rms_norm_eps: "1e-6"`) is
one transformers refuses, which `hf_config.refuse_unloadable` names. RoPE is compared as
transformers 5 reads it (`rope_of`): from `rope_parameters`, older configs' `rope_theta` and
`rope_scaling`, or both, a `rope_scaling` block taking the place of `rope_parameters`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mfsdp_ckpt.check.printable import cut_to, first_of
from mfsdp_ckpt.convert.hf_config import MAX_LAYERS

BEHAVIOUR_KEYS = (
    "hidden_act",
    "hidden_activation",
    "rms_norm_eps",
    "layer_norm_eps",
    "attention_bias",
    "mlp_bias",
    "partial_rotary_factor",
    "attn_logit_softcapping",
    "final_logit_softcapping",
    "query_pre_attn_scalar",
    # Qwen2-MoE and Qwen3-MoE: whether the top-k routing weights are renormalised
    "norm_topk_prob",
)
# Compared as the windows they give each layer (`attention_windows`): which of them decide
# depends on the family, and a Qwen config's sliding_window says nothing while
# use_sliding_window is false. (Router jitter and aux-loss keys change training, not what
# the weights compute; which layers are MoE changes the tensors' names, which export checks.)
WINDOWS = "attention windows"

# transformers' config class defaults (5.x) for the keys above, in force when config.json
# leaves one out: a config without norm_topk_prob is a model that does not renormalise
_SILU = {"hidden_act": "silu"}
FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {**_SILU, "attention_bias": False, "mlp_bias": False},
    "mistral": _SILU,
    "mixtral": _SILU,
    "qwen2": _SILU,
    "qwen3": {**_SILU, "attention_bias": False},
    "qwen2_moe": {**_SILU, "norm_topk_prob": False},
    "qwen3_moe": {**_SILU, "attention_bias": False, "norm_topk_prob": False},
}
# sliding_window and max_position_embeddings when config.json leaves them out
_DEFAULT_WINDOW = {"mistral": 4096, "mixtral": None}
_QWEN_DEFAULT_WINDOW, _QWEN_DEFAULT_MAX_WINDOW_LAYERS = 4096, 28
_DEFAULT_POSITIONS = {"llama": 2048, "mistral": 4096 * 32, "mixtral": 4096 * 32}
_QWEN_DEFAULT_POSITIONS = 32768
_QWEN_FAMILIES = ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe")
# rope_theta when config.json states none (transformers' `default_theta`), and the rope
# types whose `original_max_position_embeddings` defaults to max_position_embeddings
_DEFAULT_THETA = {family: 10000.0 for family in FAMILY_DEFAULTS} | {"mixtral": 1000000.0}
_ORIGINAL_LENGTH_TYPES = ("llama3", "yarn", "longrope")
# the families whose config.json can give a layer a sliding window
WINDOWED_FAMILIES = (*_DEFAULT_WINDOW, *_QWEN_FAMILIES)
_SHOWN_LAYERS = 8

# Keys a family's config carries but its model does not read: Gemma's activation is
# `hidden_activation` (hub configs say `hidden_act: gelu`, saved ones gelu_pytorch_tanh).
_UNUSED = {family: ("hidden_act",) for family in ("gemma", "gemma2", "gemma3", "gemma3_text")}


def rope_of(config: dict[str, Any]) -> dict[str, Any] | None:
    """The RoPE transformers 5 builds the model with from config.json (its
    `convert_rope_params_to_dict`): a non-empty `rope_scaling` replaces `rope_parameters`
    whole, as transformers takes it (a config transformers 5 saved, with a `rope_scaling`
    block added to extend its context, runs that scaling and not the `rope_parameters`
    beside it); then `rope_theta` from that block, else the top-level one, else the family's
    default; `rope_type` from the legacy `type` or `default`; a top-level
    `partial_rotary_factor`; and for llama3, yarn and longrope an
    `original_max_position_embeddings` of `max_position_embeddings` when left out. Unset
    (null) values are dropped. None when config.json states no RoPE key."""
    block = _rope_block(config)
    if block is None and "rope_theta" not in config:
        return None
    family = str(config.get("model_type"))
    rope = dict(block or {})
    rope.setdefault("rope_theta", config.get("rope_theta", _DEFAULT_THETA.get(family)))
    rope.setdefault("rope_type", rope.get("type", "default"))
    rope.pop("type", None)
    if "partial_rotary_factor" in config:
        rope.setdefault("partial_rotary_factor", config["partial_rotary_factor"])
    if rope["rope_type"] in _ORIGINAL_LENGTH_TYPES:
        rope.setdefault("original_max_position_embeddings", _positions(config))
    return {key: value for key, value in rope.items() if value is not None}


def rope_source(config: dict[str, Any]) -> str:
    """The config.json key `rope_of` took the RoPE block from, as error lines name it."""
    block = _rope_block(config)
    return (
        "rope_parameters"
        if block is not None and block is config.get("rope_parameters")
        else "rope_scaling"
    )


def _rope_block(config: dict[str, Any]) -> dict[str, Any] | None:
    """The block transformers reads RoPE from: a non-empty `rope_scaling`, else
    `rope_parameters`; None when neither is a mapping."""
    scaling, given = config.get("rope_scaling"), config.get("rope_parameters")
    if isinstance(scaling, dict) and scaling:
        return scaling
    return given if isinstance(given, dict) else None


def _positions(config: dict[str, Any]) -> Any:
    """max_position_embeddings in force: config.json's, else its family's default."""
    family = str(config.get("model_type"))
    qwen = family in _QWEN_FAMILIES
    default = _QWEN_DEFAULT_POSITIONS if qwen else _DEFAULT_POSITIONS.get(family)
    return config.get("max_position_embeddings", default)


def behaviour_differences(given: dict[str, Any], own: dict[str, Any]) -> list[str]:
    """`key=given (own: value)` for each setting (`differing_behaviour`, RoPE) they differ in."""
    found = [
        f"{key}={shown_behaviour(key, one)} (own: {shown_behaviour(key, other)})"
        for key, one, other in differing_behaviour(given, own)
    ]
    given_rope, own_rope = rope_of(given), rope_of(own)
    if given_rope is not None and own_rope is not None:
        # keys both state: a family not known here has no default rope_theta
        shared = sorted(set(given_rope) & set(own_rope))
        if any(given_rope[key] != own_rope[key] for key in shared):
            found.append(f"rope_parameters={given_rope!r} (own: {own_rope!r})")
    return found


def differing_behaviour(given: dict[str, Any], reference: dict[str, Any]) -> list[tuple]:
    """(key, given's value, reference's) for each of `BEHAVIOUR_KEYS` both state, or take
    from their family's defaults, as values of one kind that differ; and `WINDOWS` (per
    layer, `attention_windows`) where both families' windows are known and differ."""
    family = str(reference.get("model_type"))
    keys = [k for k in BEHAVIOUR_KEYS if k not in _UNUSED.get(family, ())]
    found = []
    for key in keys:
        one, other = _value(given, key), _value(reference, key)
        comparable = one is not _ABSENT and other is not _ABSENT and _kind(one) == _kind(other)
        if comparable and one != other:
            found.append((key, one, other))
    windows, own_windows = attention_windows(given), attention_windows(reference)
    if windows is not None and own_windows is not None and windows != own_windows:
        found.append((WINDOWS, windows, own_windows))
    return found


_ABSENT = object()


def _value(config: dict[str, Any], key: str) -> Any:
    if key in config:
        return config[key]
    return FAMILY_DEFAULTS.get(str(config.get("model_type")), {}).get(key, _ABSENT)


@dataclass(frozen=True)
class SlidingWindow:
    """The sliding window transformers' model of a family applies, and on which layers: what
    its config class makes of config.json (`sliding_window` kept only under
    use_sliding_window for the Qwen families, `layer_types` derived when left out), so that
    comparing configs and refusing windowed conversions read one answer."""

    size: Any  # the window in force; None: none (a Qwen config without use_sliding_window)
    positions: Any  # max_position_embeddings in force
    layers: tuple[int, ...]  # the layers that attend through `size`
    decided_by: str  # the keys that chose `layers`, as messages name them ("": the family)
    # layers layer_types marks sliding_attention while no window is in force: transformers'
    # eager and sdpa attention fail on them, and flash attention runs them unwindowed
    unwindowed: tuple[int, ...]
    layer_count: int


def sliding_window(config: Mapping[str, Any]) -> SlidingWindow | None:
    """Where transformers' model of this family slides a window, as its config class decides
    from config.json: Mistral and Mixtral on every layer, Qwen3-MoE on every layer under
    use_sliding_window, Qwen2, Qwen3 and Qwen2-MoE on the layers layer_types names, or when
    it is left out those from max_window_layers on (Qwen2, Qwen3) or every other one below it
    (Qwen2-MoE) under use_sliding_window. Llama slides none. None: a family not known here,
    or layer counts and layer_types that are not one per layer (transformers refuses them)."""
    family, layers = config.get("model_type"), config.get("num_hidden_layers", 0)
    if not _is_count(layers) or not 0 < layers <= MAX_LAYERS:
        return None
    if family == "llama":
        return SlidingWindow(None, None, (), "", (), layers)
    if family in _DEFAULT_WINDOW:
        window = config.get("sliding_window", _DEFAULT_WINDOW[family])
        positions = config.get("max_position_embeddings", _DEFAULT_POSITIONS[family])
        return _windowed(window, positions, _every_layer(window, layers), "", layers)
    if family not in _QWEN_FAMILIES:
        return None
    use = config.get("use_sliding_window", False) is True
    window = config.get("sliding_window", _QWEN_DEFAULT_WINDOW) if use else None
    positions = config.get("max_position_embeddings", _QWEN_DEFAULT_POSITIONS)
    if family == "qwen3_moe":
        every = _every_layer(window, layers)
        return _windowed(window, positions, every, "use_sliding_window", layers)
    types = config.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            return None
        named = tuple(i for i, kind in enumerate(types) if kind == "sliding_attention")
        return _windowed(window, positions, named, "layer_types", layers)
    below: Any = config.get("max_window_layers", _QWEN_DEFAULT_MAX_WINDOW_LAYERS)
    if not _is_count(below):
        return None
    if family == "qwen2_moe":  # every other layer below max_window_layers
        derived = tuple(i for i in range(min(below, layers)) if i % 2 == 0) if use else ()
    else:  # from max_window_layers on where sliding_window is not null (0 slides no window)
        derived = tuple(range(below, layers)) if window is not None else ()
    keys = f"use_sliding_window, max_window_layers={below}"
    return _windowed(window, positions, derived, keys, layers)


def _every_layer(window: Any, layers: int) -> tuple[int, ...]:
    """Every layer, for a family that slides its window on all of them; none without one."""
    return tuple(range(layers)) if _in_force(window) else ()


def _windowed(
    window: Any, positions: Any, layers: tuple[int, ...], decided_by: str, count: int
) -> SlidingWindow:
    """`layers` under `window`, or none of them without one in force."""
    if _in_force(window):
        return SlidingWindow(window, positions, layers, decided_by, (), count)
    return SlidingWindow(None, positions, (), decided_by, layers, count)


def _in_force(window: Any) -> bool:
    """Whether a sliding_window value gives a window: null does not, nor 0 (what
    Qwen2MoeConfig sets without use_sliding_window)."""
    return window is not None and window != 0


def attention_windows(config: Mapping[str, Any]) -> tuple[int | None, ...] | None:
    """The window (`sliding_window`) on each layer where it narrows attention: None for full
    attention, a window of at least max_position_embeddings narrowing nothing. None: windows
    not known here (`sliding_window`)."""
    found = sliding_window(config)
    if found is None:
        return None
    window = _narrowing(found.size, found.positions)
    return tuple(window if i in found.layers else None for i in range(found.layer_count))


def _narrowing(window: Any, positions: Any) -> Any:
    """`window` where it narrows attention: None for null or at least max_position_embeddings."""
    if window is None:
        return None
    if _is_count(positions) and _is_count(window) and window >= positions:
        return None
    return window


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def shown_behaviour(key: str, value: Any) -> str:
    """A value for an error line; per-layer windows in words."""
    if key != WINDOWS:
        return repr(value)
    sizes = set(value) - {None}
    if not sizes:
        return "none"
    if len(sizes) == 1 and None not in value:
        return f"{cut_to(repr(sizes.pop()), 40)} on every layer"
    windowed = [f"{i}: {cut_to(repr(w), 40)}" for i, w in enumerate(value) if w is not None]
    return f"{{{first_of(windowed, _SHOWN_LAYERS)}}}"


def _kind(value: Any) -> type:
    """A JSON value's kind, an integer counted as a number (`1` and `1.0` compare)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return float
    return type(value)
