"""`model.overrides` applied to the transformers config a run trains, each key checked first.

transformers takes any keyword into a config: a typo (`num_hiden_layers: 1`) was stored as
an unused field of config.json while the default shape trained, and from a model dir it was
dropped without a word. A value of the wrong type (`tie_word_embeddings: "false"`) failed in
huggingface_hub's strict dataclass validation, an 83-line traceback in every rank. Both are
refused here in one line naming `model.overrides.<key>` (exit 2), before the model is built.
"""

from __future__ import annotations

import copy
import difflib
import functools
import typing
from collections.abc import Callable
from typing import Any

from mfsdp_ckpt.convert.hf_config import transformers_reason
from trainer.config import UNTYPED, ConfigError
from trainer.shown_value import shown_value
from trainer.yaml_colon_keys import glued_value_hint

KEY = UNTYPED
# Read by every supported family's modelling code though its config class has no such field
# (Qwen2's attention: `getattr(config, "head_dim", hidden_size // num_attention_heads)`).
READ_BY_MODELS = frozenset({"head_dim"})
# The fields the supported families look up in transformers' table of activations.
ACTIVATION_KEYS = frozenset({"hidden_act", "hidden_activation"})


def overridden_config(base: Any, make: Callable[[dict[str, Any]], Any], overrides: dict) -> Any:
    """`make(overrides)`: the config built from the run's model source with `overrides`, once
    every key is known to `base` (the same source's config without them) or its class. What
    transformers refuses is named by the key that alone makes it refuse, when one does."""
    if not overrides:
        return base
    known = _known_keys(base)
    _refuse_text_rope_numbers(base, known, overrides)
    overrides = _rope_keys_moved(base, known, overrides)
    for key in overrides:
        if key not in known:
            raise ConfigError(_unknown_key(base, known, key))
    _refuse_unknown_activation(overrides)
    try:  # a copy: transformers fills in a `rope_scaling` dict it is given
        return make(copy.deepcopy(overrides))
    except Exception as err:  # a strict-dataclass error, TypeError, ValueError, ...
        key = _culprit(make, overrides)
        where = KEY if key is None else f"{KEY}.{key}"
        hint = "" if key is None else _quoted_number_hint(overrides[key])
        raise ConfigError(
            f"{where}: transformers refuses it ({transformers_reason(err)}){hint}"
        ) from None


def built_over(build: Callable[[dict[str, Any]], Any], fields: dict, overrides: dict) -> Any:
    """`build(fields | overrides)`: the config transformers makes of a config.json holding
    `fields` with `overrides` written into it, so that what its class derives from them
    (Qwen2's `layer_types` from `num_hidden_layers`) is derived from the overridden values.
    Setting overrides on a config already built kept what it derived from the old ones, and
    transformers refused that config only when the first checkpoint saved it. A config.json
    saved by transformers lists such fields too: where keeping what it lists is refused, each
    listed value that is just what the class derives from the file's own values (not one set
    by hand) is derived again; one set by hand is kept, and transformers' refusal names it."""
    fields = _without_spellings_of(build, fields, overrides)
    try:
        return build(copy.deepcopy({**fields, **overrides}))
    except Exception:
        derived = _derivable(build, fields)
        if not derived - overrides.keys():
            raise
    kept = {key: value for key, value in fields.items() if key not in derived}
    return build(copy.deepcopy({**kept, **overrides}))


def _without_spellings_of(
    build: Callable[[dict[str, Any]], Any], fields: dict, overrides: dict
) -> dict:
    """`fields` without those that are no field of the config but set one that `overrides`
    set (an older spelling transformers moves into a field: `rope_scaling`, `rope_theta`
    into `rope_parameters`): written beside the override, the file's would win over it."""
    try:
        built = build(copy.deepcopy(fields))
    except Exception:  # the file alone is refused: nothing to tell apart, its refusal says
        return fields
    own = set(built.to_dict()) | set(type(built)().to_dict())
    dropped = set()
    for key in fields.keys() - own - overrides.keys():
        try:
            without = build(copy.deepcopy({k: v for k, v in fields.items() if k != key}))
        except Exception:  # left out, this field is needed: it stays as listed
            continue
        if any(getattr(without, name, None) != getattr(built, name, None) for name in overrides):
            dropped.add(key)
    return {key: value for key, value in fields.items() if key not in dropped}


def _derivable(build: Callable[[dict[str, Any]], Any], fields: dict) -> set[str]:
    """The fields of `fields` whose value is what `build` gives them when they are left
    out: a class default, or what the class derives from the other fields."""
    found = set()
    for key, value in fields.items():
        rest = {k: v for k, v in fields.items() if k != key}
        try:
            if getattr(build(copy.deepcopy(rest)), key) == value:
                found.add(key)
        except Exception:  # left out, this field is needed: it stays as listed
            continue
    return found


def _refuse_text_rope_numbers(base: Any, known: set[str], overrides: dict) -> None:
    """Refuse, naming the key as written, a RoPE setting given as text where transformers
    takes a number (`rope_theta: '5e5'`, `rope_scaling: {factor: '2'}`): these go into
    `rope_parameters` (`_rope_keys_moved`), a dict transformers does not type-check, so the
    text failed only in the rotary embedding, as a bare TypeError naming no key. The types
    are transformers' own (`RopeParameters`)."""
    if not isinstance(getattr(base, "rope_parameters", None), dict):
        return
    rope = base.rope_parameters
    given = [(f"{KEY}.{k}", k, v) for k, v in overrides.items() if k not in known and k in rope]
    for section in ("rope_scaling", "rope_parameters"):
        if isinstance(overrides.get(section), dict):
            given += [(f"{KEY}.{section}.{k}", k, v) for k, v in overrides[section].items()]
    for where, name, value in given:
        kind = _number_kinds().get(name)
        values = value if isinstance(value, list) else [value]
        if kind is not None and any(isinstance(v, (str, bool)) for v in values):
            raise ConfigError(
                f"{where}: {shown_value(value)} is not a number, which transformers takes"
                f" ({name}: {kind.__name__}){_quoted_number_hint(value)}"
            )


@functools.cache
def _number_kinds() -> dict[str, type]:
    """The number type (float or int) of each RoPE setting transformers annotates with one
    (`RopeParameters`; `short_factor: list[float]` is float)."""
    from transformers.modeling_rope_utils import RopeParameters

    kinds = {}
    for name, hint in typing.get_type_hints(RopeParameters).items():
        args = typing.get_args(hint) or (hint,)
        args = tuple(a for arg in args for a in (typing.get_args(arg) or (arg,)))
        kind = next((a for a in args if a in (float, int)), None)
        if kind is not None:
            kinds[name] = kind
    return kinds


def _quoted_number_hint(value: Any) -> str:
    """How to write `value` as the number it reads as, where it is text that does
    (`'1e-5'`, quoted in YAML or on the command line): quoted, a value stays text, as in
    Hydra."""
    if not isinstance(value, str):
        return ""
    try:
        float(value)
    except ValueError:
        return ""
    return f"; write {value} unquoted for the number (quoted, it stays text)"


def _rope_keys_moved(base: Any, known: set[str], overrides: dict) -> dict:
    """`overrides` with every RoPE setting in one `rope_parameters`, over the base's own.
    transformers 5 keeps them there: `rope_theta: 500000` (as verl's and older configs write
    it) was dropped without a word from a model dir; `rope_scaling` (a property that sets
    `rope_parameters` whole) and `rope_theta` given together lost one or the other, and
    `rope_scaling` alone lost the model's theta. A `rope_type` other than the base's keeps
    only its theta (another type's keys mean nothing to it); `rope_scaling: null` is the
    default type. Configs without `rope_parameters` take the overrides as given."""
    rope = getattr(base, "rope_parameters", None)
    if not isinstance(rope, dict):
        return overrides
    moved = {k: v for k, v in overrides.items() if k not in known and k in rope}
    scaling = overrides.get("rope_scaling", ...)
    given = overrides.get("rope_parameters")
    if not moved and scaling is ... and not isinstance(given, dict):
        return overrides
    changes: dict[str, Any] = {}
    if scaling is None:
        changes["rope_type"] = "default"
    elif isinstance(scaling, dict):  # the older spelling `type` is rope_type
        changes.update({("rope_type" if k == "type" else k): v for k, v in scaling.items()})
    changes.update(given if isinstance(given, dict) else {})
    changes.update(moved)
    kind = changes.get("rope_type", rope.get("rope_type"))
    start = rope if kind == rope.get("rope_type") else {"rope_theta": rope.get("rope_theta")}
    kept = {k: v for k, v in overrides.items() if k not in moved and k != "rope_scaling"}
    if scaling is not ... and not isinstance(scaling, (dict, type(None))):
        kept["rope_scaling"] = scaling  # not a mapping: transformers names what is wrong
    kept["rope_parameters"] = {k: v for k, v in {**start, **changes}.items() if v is not None}
    return kept


def _refuse_unknown_activation(overrides: dict) -> None:
    """Refuse an activation transformers has no function for (`hidden_act: nope`): its config
    takes any text there, and the model failed only while it was built, after the launch,
    as a KeyError naming no key. The names are transformers' own (`ACT2FN`)."""
    for key in ACTIVATION_KEYS & overrides.keys():
        value = overrides[key]
        if not isinstance(value, str):
            continue  # not text: transformers' own type check names it
        from transformers.activations import ACT2FN

        if value not in ACT2FN:
            close = difflib.get_close_matches(value, list(ACT2FN), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else f"; one of {', '.join(ACT2FN)}"
            raise ConfigError(
                f"{KEY}.{key}: {shown_value(value)} is no activation transformers has{hint}"
            )


def _unknown_key(base: Any, known: set[str], key: Any) -> str:
    """Why `key` is refused: no field of `base`'s config class; with the closest field, or
    how to write it when it is `name:value` (`{hidden_size:256}` is one key to YAML)."""
    glued = glued_value_hint(key)
    if glued is not None:
        return f"{KEY}.{key}: {glued}"
    name = type(base).__name__
    said = f"{KEY}.{key}: not a field of {name} (the {base.model_type} config)"
    public = [candidate for candidate in known if not candidate.startswith("_")]
    close = difflib.get_close_matches(str(key), public, n=1, cutoff=0.6)
    return f"{said}; did you mean {close[0]}?" if close else said


def _known_keys(base: Any) -> set[str]:
    """The fields `base` has (what its config.json holds counts), those of a default instance
    of its class (a field config.json leaves out), and the properties with a setter
    (`rope_scaling` sets `rope_parameters`, `torch_dtype` sets `dtype`)."""
    cls = type(base)
    known = set(base.to_dict()) | set(cls().to_dict()) | set(getattr(cls, "attribute_map", {}))
    known |= READ_BY_MODELS
    for name in dir(cls):
        member = getattr(cls, name, None)
        if isinstance(member, property) and member.fset is not None:
            known.add(name)
    return known


def _culprit(make: Callable[[dict[str, Any]], Any], overrides: dict) -> str | None:
    """The first key transformers refuses on its own, None when only some keys together
    fail."""
    for key, value in overrides.items():
        try:
            make({key: copy.deepcopy(value)})
        except Exception:
            return str(key)
    return None
