"""config.json values a Megatron record fixes without any shape showing them: RoPE and norm.

A `--hf-config` with every size right can still carry another rope_theta (Qwen2.5-7B's
config for a run of Qwen2.5-Math-7B, whose shapes are the same) or rms_norm_eps: the export
then writes the trained weights under a model that computes something else, and --verify,
which compares tensors, passes. The record holds what the weights were trained with:
Megatron-LM's args `rotary_base` and `norm_epsilon` (`layernorm_epsilon` in newer args),
Megatron-Bridge's run_config.yaml `rotary_base` and `layernorm_epsilon`, and their rope
scaling: Llama 3.1's (`use_rope_scaling`, Bridge's `rope_scaling`, with
`rope_scaling_factor`; Megatron-core fixes low_freq_factor 1, high_freq_factor 4 and
original_max_position_embeddings 8192, rotary_pos_embedding.py) and linear position
interpolation (`rotary_seq_len_interpolation_factor`, Bridge's `seq_len_interpolation_factor`).

transformers' dynamic NTK scaling (`rope_type` "dynamic") is the default RoPE up to the
config's max_position_embeddings and rescales the base only for longer inputs, so within the
length a run trained at it is the model of a record without scaling, and compares as none
(no other rope_type of transformers leaves the trained frequencies alone: linear, llama3,
yarn and longrope change them at every length).

Only what the record states is compared, never a default filled in for it, and rotary
settings only where it records rotary position embeddings (`position_embedding_type`
'rope'): Megatron-LM records rotary_base whatever the position embedding, and unused it
says nothing. A key config.json leaves out takes a default this module does not know, so it
is not compared either (an unloadable value, `"1e-6"`, is named by `hf_config`). A value
the record states as no finite number (NaN, Infinity, a list, `"1e-6"`) cannot be compared
and is no value the run trained with: `damaged_values` names it, for the caller to refuse
the record as damaged, never to skip the comparison in silence.
"""

from __future__ import annotations

import math
from typing import Any

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.convert.config_behaviour import rope_of, rope_source
from mfsdp_ckpt.convert.megatron_config import LLAMA3_DEFAULT_FACTOR, LLAMA3_FIXED, shown_value

# linear interpolation's factor: Megatron-LM's name, then Bridge's
_FACTOR_KEYS = ("rotary_seq_len_interpolation_factor", "seq_len_interpolation_factor")
_SCALING_KEYS = ("use_rope_scaling", "rope_scaling", *_FACTOR_KEYS)
_DEFAULT_WITHIN_LENGTH = ("dynamic",)  # rope types computing the default up to max positions
_REL_TOL = 1e-6  # a value stored as float32 somewhere on its way still compares equal


def _number(value: Any) -> float | None:
    """`value` as a finite float; None for anything else (a bool, NaN, an int past float's
    range, a string, a container)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int of 1024 bits or more
        return None
    return number if math.isfinite(number) else None


def _differ(one: Any, other: Any) -> bool:
    a, b = _number(one), _number(other)
    return a is not None and b is not None and not math.isclose(a, b, rel_tol=_REL_TOL)


def _compared_keys(settings: dict[str, Any]) -> list[str]:
    """The record's keys (Megatron-LM names) `value_disagreements` compares as numbers."""
    keys = ["norm_epsilon"]
    if settings.get("position_embedding_type") == "rope":
        keys += ["rotary_base", *_FACTOR_KEYS]
        if settings.get("use_rope_scaling") is True or settings.get("rope_scaling") is True:
            keys.append("rope_scaling_factor")
    return keys


def damaged_values(settings: dict[str, Any], names: dict[str, str]) -> list[str]:
    """`name=value` (as the record names the key) for each value `value_disagreements`
    compares that the record states (not null) as no finite number; empty when none."""
    return [
        f"{names.get(key, key)}={cut_to(shown_value(settings[key]), 60)}"
        for key in _compared_keys(settings)
        if settings.get(key) is not None and _number(settings[key]) is None
    ]


def value_disagreements(
    given: dict[str, Any], settings: dict[str, Any], names: dict[str, str]
) -> list[str]:
    """`key=given (record: name value)` for each value (module docstring) in which `given`
    (config.json data) and the record's `settings` (Megatron-LM names; `names`: what the
    record calls a renamed one) differ; empty when they agree or state none."""

    def named(key: str) -> str:
        return names.get(key, key)

    found = []
    eps = settings.get("norm_epsilon")
    if _differ(given.get("rms_norm_eps"), eps):
        found.append(
            f"rms_norm_eps={given['rms_norm_eps']!r} (record: {named('norm_epsilon')} {eps!r})"
        )
    rope = rope_of(given)
    if settings.get("position_embedding_type") != "rope" or rope is None:
        return found
    base = settings.get("rotary_base")
    if _differ(rope.get("rope_theta"), base):
        found.append(f"rope_theta={rope['rope_theta']!r} (record: {named('rotary_base')} {base!r})")
    recorded = _recorded_scaling(settings)
    stated = _stated_scaling(rope)
    if recorded is not None and not _same_scaling(stated, recorded):
        found.append(f"rope scaling {_shown(stated)} (record: {_shown(recorded)})")
    return found


Scaling = tuple[str, dict[str, Any]]  # (rope_type, its parameters)


def _recorded_scaling(settings: dict[str, Any]) -> Scaling | None:
    """The rope scaling the record states, as transformers names it; None when it records
    none of its switches. Both kinds at once is a scaling no transformers config states."""
    if not any(key in settings for key in _SCALING_KEYS):
        return None
    llama3 = settings.get("use_rope_scaling") is True or settings.get("rope_scaling") is True
    factor = settings.get("rotary_seq_len_interpolation_factor")
    if factor is None:
        factor = settings.get("seq_len_interpolation_factor")
    linear = factor is not None and not (_number(factor) is not None and _number(factor) == 1.0)
    if llama3 and linear:
        return "llama3 and linear interpolation", {}
    if linear:
        return "linear", {"factor": factor}
    if llama3:
        llama = settings.get("rope_scaling_factor", LLAMA3_DEFAULT_FACTOR)
        return "llama3", {"factor": llama, **LLAMA3_FIXED}
    return "default", {}


def _stated_scaling(rope: dict[str, Any]) -> Scaling:
    """A config's rope scaling (`config_behaviour.rope_of`): its type and the parameters
    Megatron-core's counterpart has (linear interpolation by 1, and dynamic NTK, are none
    within the trained length: module docstring)."""
    kind = str(rope.get("rope_type", "default"))
    if kind in _DEFAULT_WITHIN_LENGTH or (kind == "linear" and _number(rope.get("factor")) == 1.0):
        return "default", {}
    wanted = {"linear": ("factor",), "llama3": ("factor", *LLAMA3_FIXED)}
    return kind, {key: rope.get(key) for key in wanted.get(kind, ())}


def _same_scaling(stated: Scaling, recorded: Scaling) -> bool:
    """The same kind, with each parameter the config states equal to the record's."""
    if stated[0] != recorded[0]:
        return False
    return not any(
        value is not None and (_number(value) is None or _differ(value, recorded[1][key]))
        for key, value in stated[1].items()
    )


def _shown(scaling: Scaling) -> str:
    kind, parameters = scaling
    if kind == "default":
        return "none"
    stated = ", ".join(f"{key} {cut_to(repr(value), 40)}" for key, value in parameters.items())
    return f"{kind}" + (f" ({stated})" if stated else "")


MEGATRON_ROPE = (
    "Megatron-core's rope position embedding runs no scaling, linear (--rotary-seq-len-"
    "interpolation-factor) and llama3 with low_freq_factor 1, high_freq_factor 4 and"
    " original_max_position_embeddings 8192 (--use-rope-scaling --rope-scaling-factor)"
)


def _megatron_settings(kind: str, factor: Any) -> dict[str, Any]:
    """The Megatron-LM settings that run a `kind` scaling by `factor` with Megatron-core's
    'rope' position embedding ({}: none do, or none is needed), as a record holds them."""
    if kind == "linear":
        return {"rotary_seq_len_interpolation_factor": factor}
    if kind == "llama3":
        return {"use_rope_scaling": True, "rope_scaling_factor": factor}
    return {}


def megatron_rope_mismatch(config: dict[str, Any]) -> str | None:
    """The rope scaling config.json (data) states, in words naming its key, when no
    Megatron-core 'rope' setting computes it; None when one does. The settings are made from
    the config's own factor and compared with it as export-hf compares a config with a
    record (`_same_scaling`), so what an mcore import accepts is what export-hf takes back
    against the run's record: llama3 only with Megatron-core's fixed frequencies and context
    length, and no yarn or longrope (Megatron-core runs YaRN as another position embedding
    type, whose record export-hf does not convert)."""
    rope = rope_of(config)
    if rope is None:
        return None
    stated = _stated_scaling(rope)
    kind, parameters = stated
    if kind == "default":
        return None
    recorded = _recorded_scaling(_megatron_settings(kind, parameters.get("factor")))
    if recorded is not None and _same_scaling(stated, recorded):
        return None
    found = f"{rope_source(config)}.rope_type={cut_to(repr(kind), 40)}"
    if recorded is None:  # a kind no Megatron-core rope setting has
        return found
    differing = [
        f"{name}={cut_to(repr(value), 40)} "
        + (
            "(not a number)"
            if _number(value) is None
            else f"(Megatron-core: {recorded[1].get(name)!r})"
        )
        for name, value in parameters.items()
        if not _same_scaling((kind, {name: value}), recorded)
    ]
    return f"{found} with {', '.join(differing)}"
