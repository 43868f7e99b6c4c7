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
    written = text.rstrip("\r\n")
    one_line = "\n" not in written
    line, column = _place(written, err.pos)
    place = f"column {column}" if one_line else f"line {line}, column {column}"
    return f"{err.msg}{joiner}{place}{_cause(err, text, one_line)}"


def _place(written: str, pos: int) -> tuple[int, int]:
    """Line and column of `pos` in `written` (the text less its final line end), as Python
    counts them, but no further than just after the last character written: a line cut
    before its closing brackets ends in its newline, and Python's place past it, "line 2
    column 1" of a one-line row, was reported as "column 1", the line's first character."""
    pos = min(pos, len(written))
    return written.count("\n", 0, pos) + 1, pos - written.rfind("\n", 0, pos)


def _cause(err: json.JSONDecodeError, text: str, one_line: bool) -> str:
    """`: <why>` for a string left open or holding a raw control character, or for text that
    ends before its JSON does; else ""."""
    what = "line" if one_line else "file"
    if err.msg.startswith("Unterminated string"):  # the text ran out inside it
        return f": the {what} ends inside a string"
    if err.pos >= len(text.rstrip("\r\n")) and not err.msg.startswith("Invalid control"):
        return f": the {what} ends before its object or array is closed"
    if not err.msg.startswith("Invalid control character") or err.pos >= len(text):
        return ""
    character = text[err.pos]
    if character in "\r\n":  # the line's own end, inside a string never closed
        return ": the line ends inside a string"
    return f": the string holds {character!r} as it is, which JSON writes escaped"
