"""One notion of a cell that holds nothing, for the columns and fields whose value is
refused (`tools`, `enable_thinking`, verl's `extra_info.tools_kwargs`): a cell meaning
"none" must pass however the table stores it.

verl writes a row's tool list or kwargs as JSON text where Arrow cannot unify their
structs across rows, so "no tools" arrives as the text '[]' as often as the list []; and
a parquet struct unified across rows gives a row lacking a field that field with every
sub-field null. Refusing those while accepting [] made one meaning pass or fail by how it
was stored.
"""

from __future__ import annotations

import json
import math
from typing import Any

# text longer than this is not parsed: JSON holding nothing, with a few spaces, is shorter
_EMPTY_JSON_TEXT_MAX = 16


def holds_nothing(value: Any) -> bool:
    """Whether `value` means "nothing": null, NaN (pandas' missing value), an empty list,
    dict or text (blank text too), text that is JSON for one of those ('[]', '{}', '""',
    'null'), or a dict each of whose values holds nothing. `False` and `0` are values."""
    if value is None:
        return True
    if isinstance(value, float):
        return math.isnan(value)
    if isinstance(value, (list, tuple)):
        return len(value) == 0
    if isinstance(value, dict):
        return all(holds_nothing(item) for item in value.values())
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return True
        if len(text) > _EMPTY_JSON_TEXT_MAX or text[0] not in '[{"n':
            return False
        try:
            parsed = json.loads(text)
        except ValueError:
            return False
        if isinstance(parsed, str):  # '""': JSON for empty text, not text to parse again
            return parsed == ""
        return holds_nothing(parsed)
    return False
