"""config.json settings that change what a model computes from the same weights.

Two configs with every shape alike can still describe different models: another activation,
another RoPE base (Qwen2.5-7B's config given for a Qwen2.5-Math-7B run, which has the same
shapes and another rope_theta), another norm epsilon. An export under a `--hf-config` that
differs there from the checkpoint's own config.json writes the trained weights under a model
they were not trained as, and nothing downstream notices.

Only keys both configs state, as values of one kind, are compared: a key left out takes a
default this module does not know, and a value of another kind (`rms_norm_eps: "1e-6"`) is
one transformers refuses, which `hf_config.refuse_unloadable` names. RoPE is compared in
either spelling: transformers 5 keeps it in `rope_parameters`, older configs in `rope_theta`
and `rope_scaling`.
"""

from __future__ import annotations

from typing import Any

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
)


# Keys a family's config carries but its model does not read: Gemma's activation is
# `hidden_activation` (hub configs say `hidden_act: gelu`, saved ones gelu_pytorch_tanh).
_UNUSED = {family: ("hidden_act",) for family in ("gemma", "gemma2", "gemma3", "gemma3_text")}


def rope_of(config: dict[str, Any]) -> dict[str, Any] | None:
    """The RoPE a config states, as transformers 5's `rope_parameters` (`rope_type`
    defaulted, legacy `type` renamed); None when it states none."""
    given = config.get("rope_parameters")
    if not isinstance(given, dict):
        theta, scaling = config.get("rope_theta"), config.get("rope_scaling")
        if theta is None and not isinstance(scaling, dict):
            return None
        given = {**(scaling if isinstance(scaling, dict) else {}), "rope_theta": theta}
    rope = {key: value for key, value in given.items() if value is not None}
    legacy_type = rope.pop("type", None)
    rope.setdefault("rope_type", legacy_type or "default")
    return rope


def behaviour_differences(given: dict[str, Any], own: dict[str, Any]) -> list[str]:
    """`key=given (own: value)` for each setting both state differently."""
    keys = [k for k in BEHAVIOUR_KEYS if k not in _UNUSED.get(str(own.get("model_type")), ())]
    found = [
        f"{key}={given[key]!r} (own: {own[key]!r})"
        for key in keys
        if key in given
        and key in own
        and _kind(given[key]) == _kind(own[key])
        and given[key] != own[key]
    ]
    given_rope, own_rope = rope_of(given), rope_of(own)
    if given_rope is not None and own_rope is not None:
        # keys both state: a config without rope_theta (an old linear-scaling one) takes the
        # default that transformers 5 then writes out
        shared = sorted(set(given_rope) & set(own_rope))
        if any(given_rope[key] != own_rope[key] for key in shared):
            found.append(f"rope_parameters={given_rope!r} (own: {own_rope!r})")
    return found


def _kind(value: Any) -> type:
    """A JSON value's kind, an integer counted as a number (`1` and `1.0` compare)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return float
    return type(value)
