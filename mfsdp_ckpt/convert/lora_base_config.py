"""Where a LoRA step's own model config differs from the config.json of the base dir it names.

A run trained with `model.overrides` (rope_theta, rope_scaling, rms_norm_eps,
num_hidden_layers, ...) built its model from the base dir's config.json changed by them,
and its steps keep that config (`huggingface/config.json`). An adapter export names the
base dir (`base_model_name_or_path`), and PEFT builds the model from that dir's own
config.json: the adapter then ran on a model it was never trained on, with no word
(logits off by more than their own size). Both configs are read as transformers reads
them (`load_hf_config`: a `rope_theta` of an older config.json and the `rope_parameters`
a newer transformers writes are one setting), and compared on every key but the ones that
only record where and how a config was saved (`BOOKKEEPING`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from mfsdp_ckpt.check.printable import cut_to, first_of
from mfsdp_ckpt.convert.hf_config import HFConfigError, load_hf_config

# Keys that say nothing about the model the weights are: the dir a config was read from, the
# transformers that wrote it, the dtype the weights were saved in (PEFT loads the adapter onto
# a base in any dtype) and the generation cache switch. Keys starting with `_` are
# transformers' own runtime fields (_name_or_path, _attn_implementation, ...).
BOOKKEEPING = frozenset({"transformers_version", "torch_dtype", "dtype", "use_cache"})
_SHOWN_KEYS = 6  # differing keys a note spells out with their values
_SHOWN_VALUE_CHARS = 80
_UNSET = object()  # a key one of the two configs lacks


@dataclass(frozen=True)
class BaseConfigCheck:
    """The outcome of comparing a step's config with its base dir's: the keys that differ
    (`differing`, "key base -> trained" each), or why the base could not be read
    (`unreadable`); both empty when they agree."""

    differing: list[str]
    unreadable: str | None = None


def compare_base_config(
    trained: str | os.PathLike, trained_root: str | os.PathLike | None, base: str
) -> BaseConfigCheck:
    """Compare the step's config (`trained`: its huggingface/ dir, read inside
    `trained_root`) with the base dir `base`'s config.json. A step config that cannot be
    read is no finding here (export reads it, and says so, where it needs it)."""
    if not os.path.isdir(base):
        return BaseConfigCheck([], f"{base} is not here (no such directory)")
    try:
        base_config = _model_keys(load_hf_config(base))
    except HFConfigError as err:
        return BaseConfigCheck([], str(err))
    try:
        trained_config = _model_keys(load_hf_config(trained, trained_root))
    except HFConfigError:
        return BaseConfigCheck([])
    differing = [
        f"{key} {_shown(base_config.get(key, _UNSET))} -> {_shown(trained_config.get(key, _UNSET))}"
        for key in sorted(base_config.keys() | trained_config.keys())
        if base_config.get(key, _UNSET) != trained_config.get(key, _UNSET)
    ]
    return BaseConfigCheck(differing)


def differing_words(check: BaseConfigCheck) -> str:
    """The differing keys with their values, the first `_SHOWN_KEYS` of them."""
    return first_of(check.differing, _SHOWN_KEYS)


def _model_keys(config: Any) -> dict[str, Any]:
    """The config's fields that decide the model (`BOOKKEEPING` and `_` fields left out)."""
    return {
        key: value
        for key, value in config.to_dict().items()
        if key not in BOOKKEEPING and not key.startswith("_")
    }


def _shown(value: object) -> str:
    """A value as a note shows it; a key one config lacks as `unset`."""
    if value is _UNSET:
        return "unset"
    return cut_to(repr(value), _SHOWN_VALUE_CHARS)
