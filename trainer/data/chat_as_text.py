"""A prompt cell holding chat turns written out as text: refused.

A CSV round trip or pandas' `df.astype(str)` turns a `prompt` cell's list of
{role, content} turns into their JSON text (`[{"role": "user", ...}]`) or Python repr
(`[{'role': 'user', ...}]`). Read as a plain text prompt, that text became one user turn
and the policy was asked the literal brackets and keys, exit 0; verl hands such a cell to
the chat template as it is, which is no chat either. The same mistake in an SFT `messages`
column was already refused (a string is no list of turns). A text is refused only when it
parses as a list of {role, content} dicts: a plain prompt that starts with `[` reads.
Every row is looked at, so what is parsed is bounded before it is (the limits below): a
text that is no chat, of any size or nesting, reads as a prompt at the cost of a scan.
"""

from __future__ import annotations

import ast
import io
import json
import re
import tokenize
from typing import Any

from mfsdp_ckpt.check.printable import cut_to

# What is parsed is bounded before parsing, as every row pays for it. A chat written out names
# its keys quoted (json.dumps and repr write `"role"`, `'role'`): a text without both is a
# prompt, read without parsing it.
_TURN_KEYS = tuple(re.compile(rf"""["']{key}["']""") for key in ("role", "content"))
# Python's parser holds ~500 bytes per token of a literal (a 6 MB `[1,1,...]` took 2.9 GB and
# 41 s), json less but also per value: a text is parsed only when it has at most this many
# tokens (~10 MB parsed), nested at most _MAX_DEPTH deep, and every token one a literal or
# JSON is written with. Past ~200 levels (brackets and signs) Python 3.11's parser raises
# MemoryError, no different from the machine's, and so does a long run of unary signs
# (`[------1]`): neither is parsed. A chat of more tokens (some thousands of turns) reads as
# a prompt; a turn's text is one token, however long.
_MAX_TOKENS = 20_000
_MAX_DEPTH = 100
_LITERAL_NAMES = frozenset({"True", "False", "None", "set", "true", "false", "null"})
_LITERAL_OPS = frozenset("[]{}(),:+-")
_OPENING, _CLOSING, _SIGNS = frozenset("[{("), frozenset("]})"), frozenset("+-")
_VALUE_TOKENS = frozenset({tokenize.NAME, tokenize.NUMBER, tokenize.STRING})
# between tokens: not the previous token a sign follows
_SPACING_TOKENS = frozenset(
    {tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT}
    | {tokenize.ENDMARKER}
)
_UNTOKENIZED = (tokenize.TokenError, SyntaxError)  # an unclosed string or bracket
# What the parsers raise on a text that is no literal or no JSON: json's RecursionError on
# deep nesting, literal_eval's TypeError on an unhashable key, the rest their own errors
_NOT_PARSED = (ValueError, SyntaxError, TypeError, RecursionError)


def chat_written_as_text(text: str, column: str) -> str | None:
    """Why the text prompt `text` of `column` cannot train (chat turns written out as JSON or
    as a Python literal, which form named), or None when it is a prompt to read as text."""
    stripped = text.strip()
    if not (stripped.startswith("[") and stripped.endswith("]")):
        return None
    if not all(key.search(stripped) for key in _TURN_KEYS):
        return None
    form = _parsed_form(stripped)
    if form is None:
        return None
    return (
        f"'{column}' is text holding chat turns written out as {form}"
        f" ({cut_to(repr(text), 80)}), not the turns: store the list of"
        " {role, content} turns itself (a CSV round trip or astype(str) writes"
        " them as text)"
    )


def _parsed_form(text: str) -> str | None:
    """The form ("JSON", "a Python literal") in which `text` parses as chat turns, or None.
    Text that parses as JSON is not parsed again as a literal: JSON's value is the one."""
    if not _within_bounds(text):
        return None
    for form, parse in (("JSON", json.loads), ("a Python literal", ast.literal_eval)):
        try:
            value = parse(text)
        except _NOT_PARSED:
            continue
        return form if _is_turns(value) else None
    return None


def _within_bounds(text: str) -> bool:
    """Whether `text`'s tokens are all ones a literal or JSON is written with, at most
    _MAX_TOKENS of them, nested at most _MAX_DEPTH deep, with no sign after a sign: read
    one token at a time, so a text of too many costs no more than that many. A text that
    fails this is no literal nor JSON, or none of a chat's size."""
    depth, count, previous = 0, 0, ""
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type in _SPACING_TOKENS:
                continue
            count += 1
            if count > _MAX_TOKENS:
                return False
            if token.type == tokenize.NAME and token.string not in _LITERAL_NAMES:
                return False
            if token.type == tokenize.OP:
                if token.string not in _LITERAL_OPS:
                    return False
                if token.string in _SIGNS and previous in _SIGNS:
                    return False
                depth += (token.string in _OPENING) - (token.string in _CLOSING)
                if depth > _MAX_DEPTH:
                    return False
            elif token.type not in _VALUE_TOKENS:
                return False
            previous = token.string
    except _UNTOKENIZED:
        return False
    return True


def _is_turns(value: Any) -> bool:
    """Whether `value` is a non-empty list whose every item is a dict with a role and a
    content: the shape of a chat."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(turn, dict) and {"role", "content"} <= turn.keys() for turn in value)
    )
