"""JSON objects with each key once: Python's json keeps the last of a key given twice,
silently. A safetensors header naming a tensor twice (which one is the weight?) or a data
row with two `messages` (one is dropped unseen) is refused instead, as the config YAML
loader refuses a key given twice. Every JSON file a user hands over (config.json, a
safetensors index, manifest.json, ckpt_contents.json, an adapter config) is read with
`loads_unique`, so none takes the last of two values unseen."""

from __future__ import annotations

import json
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


__all__ = ["DuplicateKeyError", "loads_unique", "unique_keys"]
