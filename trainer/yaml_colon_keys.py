"""A mapping key YAML read from `name:value`: the flow-mapping trap, named as such.

In a flow mapping YAML needs a space after a key's colon: `{hidden_size:256}` is one key,
`hidden_size:256`, with no value. Looked up as a field it was refused as unknown, with a
suggestion (`did you mean hidden_size?`) that did not say what was wrong with what was
written. Every place that looks keys up (`model.overrides`, the config's own keys) asks
`glued_value_hint` first and says how to write it instead.
"""

from __future__ import annotations


def glued_value_hint(key: object) -> str | None:
    """How to write `key` when it is `name:value` with no space after the colon (`name` and
    `value` not empty), else None."""
    if not isinstance(key, str):
        return None
    name, colon, value = key.partition(":")
    if not colon or not name.strip() or not value or value[0].isspace():
        return None
    return f"YAML reads this as one key, as no space follows the colon; write {{{name}: {value}}}"
