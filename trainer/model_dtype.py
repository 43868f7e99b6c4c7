"""The dtype a model's config names, checked as plain data.

transformers turns a config's `dtype` (or, where that is unset, its older `torch_dtype`)
into `getattr(torch, value)`: any other text (`"evil"`) failed only in each rank, after
torch and transformers loaded, as "config.json that transformers cannot read
(AttributeError ...)", while `mfsdp config check` called the config valid. The launcher
refuses it here, before anything loads, from config.json and from `model.overrides` alike.
No torch: the names come from `mfsdp_ckpt.format.dtypes`.
"""

from __future__ import annotations

from typing import Any

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.format.dtypes import BY_NAME

DTYPE_KEYS = ("dtype", "torch_dtype")  # transformers 5's name first, then its older alias
_MODEL_DTYPES = frozenset(name for name, dtype in BY_NAME.items() if dtype.is_floating_point)


def named_dtype(fields: dict[str, Any]) -> tuple[str, Any] | None:
    """The key and value of the dtype transformers reads from `fields` (config.json's or
    model.overrides'): `dtype` where set, else `torch_dtype`; None where neither is."""
    for key in DTYPE_KEYS:
        if fields.get(key) is not None:
            return key, fields[key]
    return None


def dtype_problem(value: Any) -> str | None:
    """Why `value` is no dtype a model's weights can have, None where it is one: the name
    of a floating-point torch dtype (`bfloat16`, `float32`, ...)."""
    if isinstance(value, str) and value in _MODEL_DTYPES:
        return None
    return (
        f"{cut_to(repr(value), 80)} is not a floating-point torch dtype"
        " (bfloat16, float16, float32, ...)"
    )
