"""A prompt cell holding chat turns written out as text: refused.

A CSV round trip or pandas' `df.astype(str)` turns a `prompt` cell's list of
{role, content} turns into their JSON text (`[{"role": "user", ...}]`) or Python repr
(`[{'role': 'user', ...}]`). Read as a plain text prompt, that text became one user turn
and the policy was asked the literal brackets and keys, exit 0; verl hands such a cell to
the chat template as it is, which is no chat either. The same mistake in an SFT `messages`
column was already refused (a string is no list of turns). A text is refused only when it
parses as a list of {role, content} dicts: a plain prompt that starts with `[` reads.
"""

from __future__ import annotations

import ast
import json
from typing import Any

from mfsdp_ckpt.check.printable import cut_to

# A text too deeply nested to parse is no list of turns written out (Python's parser and
# json both raise on it, past their recursion limits)
_NOT_PARSED = (ValueError, SyntaxError, TypeError, RecursionError)


def chat_written_as_text(text: str, column: str) -> str | None:
    """Why the text prompt `text` of `column` cannot train (chat turns written out as JSON or
    as a Python literal, which form named), or None when it is a prompt to read as text."""
    stripped = text.strip()
    if not (stripped.startswith("[") and stripped.endswith("]")):
        return None
    for form, parse in (("JSON", json.loads), ("a Python literal", ast.literal_eval)):
        try:
            value = parse(stripped)
        except _NOT_PARSED:
            continue
        if _is_turns(value):
            return (
                f"'{column}' is text holding chat turns written out as {form}"
                f" ({cut_to(repr(text), 80)}), not the turns: store the list of"
                " {role, content} turns itself (a CSV round trip or astype(str) writes"
                " them as text)"
            )
    return None


def _is_turns(value: Any) -> bool:
    """Whether `value` is a non-empty list whose every item is a dict with a role and a
    content: the shape of a chat."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(turn, dict) and {"role", "content"} <= turn.keys() for turn in value)
    )
