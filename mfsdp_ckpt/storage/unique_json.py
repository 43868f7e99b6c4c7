"""JSON objects with each key once: Python's json keeps the last of a key given twice,
silently. A safetensors header naming a tensor twice (which one is the weight?) or a data
row with two `messages` (one is dropped unseen) is refused instead, as the config YAML
loader refuses a key given twice. Every JSON file a user hands over (config.json, a
safetensors index, manifest.json, ckpt_contents.json, an adapter config) is read with
`loads_unique`, so none takes the last of two values unseen."""

from __future__ import annotations

import json
import math
from typing import Any

from mfsdp_ckpt.errors import MfsdpFailedError

MAX_SHOWN_KEY = 100  # characters of the key an error quotes


class DuplicateKeyError(MfsdpFailedError, ValueError):
    """An object gave `key` twice; the message quotes it, cut short. Readers catch it with
    their "not valid JSON" handling (a ValueError) and name the file with the exit code
    they give a malformed one; its own kind (a failed check) is for any that does not."""

    def __init__(self, key: str) -> None:
        super().__init__(f"key {key!r:.{MAX_SHOWN_KEY}} appears twice")
        self.key = key


def unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """`json.loads`' object_pairs_hook: the object as a dict, or DuplicateKeyError."""
    found: dict = {}
    for key, value in pairs:
        if key in found:
            raise DuplicateKeyError(key)
        found[key] = value
    return found


def loads_unique(text: str | bytes) -> Any:
    """`json.loads` refusing an object that gives a key twice. DuplicateKeyError is a
    ValueError, so a caller's "not valid JSON" handling names the file and quotes the key."""
    return json.loads(text, object_pairs_hook=unique_keys)


def loads_object(text: str | bytes, where: str, error: type[Exception]) -> dict:
    """The JSON object in `text` (each key once), else `error` in one line naming `where`:
    not valid JSON (a 5,000-digit number and `[[[[...` nesting included, which raise
    RecursionError, no ValueError), or another value than an object."""
    try:
        data = loads_unique(text)
    except (ValueError, RecursionError) as err:
        raise error(f"{where}: not valid JSON ({str(err)[:120]})") from None
    if not isinstance(data, dict):
        raise error(f"{where}: expected a JSON object, found {type(data).__name__}")
    return data


def first_nonfinite(data: object) -> tuple[str, float] | None:
    """The key path (`rope_scaling.factor`, `layer_scales[1]`) and value of the first NaN or
    +-Infinity in parsed JSON, else None. Python's json reads the literals (and 1e999 as
    inf), which RFC 8259 JSON has none of: `rms_norm_eps: NaN` would load and train on NaN,
    a `temperature: NaN` sample from nothing. Walked with a stack: the file is bounded, its
    depth is not."""
    stack: list[tuple[str, object]] = [("", data)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            return where, value
        if isinstance(value, dict):
            stack += [
                (f"{where}.{key}" if where else str(key), item) for key, item in value.items()
            ][::-1]
        elif isinstance(value, list):
            stack += [(f"{where}[{index}]", item) for index, item in enumerate(value)][::-1]
    return None


__all__ = ["DuplicateKeyError", "first_nonfinite", "loads_unique", "unique_keys"]
