"""One notion of a cell that holds nothing, for the columns and fields whose value is
refused (`tools`, `enable_thinking`, verl's `extra_info.tools_kwargs`): a cell meaning
"none" must pass however the table stores it.

verl writes a row's tool list or kwargs as JSON text where Arrow cannot unify their
structs across rows, so "no tools" arrives as the text '[]' as often as the list []; and
a parquet struct unified across rows gives a row lacking a field that field with every
sub-field null. Refusing those while accepting [] made one meaning pass or fail by how it
was stored: so JSON text is parsed whatever its length up to JSON_TEXT_MAX (text of 27
characters was not, and '{"calc_gsm8k_reward": null}' was refused where the dict passed),
nested no deeper than MAX_DEPTH (a bound on the work, as for chat turns written as text).

A dict of nothing (`{"a": null}`) is nothing only where asked (`nested`): in verl's kwargs
it asks for no tool, but a chat template's `{% if tools %}` reads any non-empty dict as a
value, so a template argument is nothing only when empty at the top.
"""

from __future__ import annotations

import json
import math
from typing import Any

# JSON text longer than this is a value: no table stores "nothing" in more
JSON_TEXT_MAX = 64 * 1024
# brackets nested deeper than this: a value, not parsed (the bound chat_as_text.py uses)
MAX_DEPTH = 100
_OPENING, _CLOSING = frozenset("[{"), frozenset("]}")
_VALUE = object()  # text that is no JSON this module reads: a value


def holds_nothing(value: Any, *, nested: bool = False) -> bool:
    """Whether `value` means "nothing": null, NaN (pandas' missing value), an empty list,
    dict or text (blank text too), or text that is JSON for one of those ('[]', '{}', '""',
    'null'); with `nested`, a dict each of whose values holds nothing too (verl's kwargs:
    a parquet struct unified across rows). `False` and `0` are values."""
    if value is None:
        return True
    if isinstance(value, float):
        return math.isnan(value)
    if isinstance(value, (list, tuple)):
        return len(value) == 0
    if isinstance(value, dict):
        if not nested:
            return not value
        return all(holds_nothing(item, nested=True) for item in value.values())
    if isinstance(value, str):
        parsed = _json_of(value.strip())
        if isinstance(parsed, str):  # '""': JSON for empty text, not text to parse again
            return parsed == ""
        return parsed is not _VALUE and holds_nothing(parsed, nested=nested)
    return False


def _json_of(text: str) -> Any:
    """What `text` is JSON for ("" for blank text), or _VALUE: text that is no JSON, longer
    than JSON_TEXT_MAX or nested over MAX_DEPTH deep."""
    if not text:
        return ""
    if len(text) > JSON_TEXT_MAX or text[0] not in '[{"n' or not _shallow(text):
        return _VALUE
    try:
        return json.loads(text)
    except ValueError:
        return _VALUE


def _shallow(text: str) -> bool:
    """Whether `text`'s brackets outside JSON strings nest no more than MAX_DEPTH deep
    (counted only where it holds more brackets than that). One pass, each character looked
    at once: a pattern for JSON strings, retried from every quote of an unclosed one (a cell
    of escaped quotes), took time growing as the square of the cell's length."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return True
    depth, in_string, escaped = 0, False, False
    for char in text:
        if in_string:
            escaped, in_string = (False, True) if escaped else (char == "\\", char != '"')
        elif char == '"':
            in_string = True
        elif char in _OPENING:
            depth += 1
            if depth > MAX_DEPTH:
                return False
        elif char in _CLOSING:
            depth -= 1
    return True
