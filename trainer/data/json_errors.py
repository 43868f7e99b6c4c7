"""What is wrong with a data file's JSON, in words that find the spot: Python's own message
for the most common bad line, one cut short or missing its closing quote, is "Invalid control
character at", which ends where the position it was followed by was, names a character the
user never wrote (the line's own newline, inside the string left open), and gave no column
to look at on a line of thousands of characters."""

from __future__ import annotations

import json

# Python's messages that end in "at" and were followed by the position:
# "Invalid control character at", "Unterminated string starting at"
_OPEN_ENDED = " at"


def json_error_words(err: json.JSONDecodeError, text: str) -> str:
    """`err`'s message with its place in `text`: the column alone when `text` is one line (a
    JSONL row), else the line and column; and, where the text ends inside a string (a line
    cut short, a closing quote dropped), that said in words."""
    joiner = " " if err.msg.endswith(_OPEN_ENDED) else " at "
    one_line = "\n" not in text.rstrip("\r\n")
    place = f"column {err.colno}" if one_line else f"line {err.lineno}, column {err.colno}"
    return f"{err.msg}{joiner}{place}{_cause(err, text, one_line)}"


def _cause(err: json.JSONDecodeError, text: str, one_line: bool) -> str:
    """`: <why>` for a string left open or holding a raw control character; else ""."""
    if err.msg.startswith("Unterminated string"):  # the text ran out inside it
        return f": the {'line' if one_line else 'file'} ends inside a string"
    if not err.msg.startswith("Invalid control character") or err.pos >= len(text):
        return ""
    character = text[err.pos]
    if character in "\r\n":  # the line's own end, inside a string never closed
        return ": the line ends inside a string"
    return f": the string holds {character!r} as it is, which JSON writes escaped"
