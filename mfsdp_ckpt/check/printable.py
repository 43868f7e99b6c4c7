"""Text from a checkpoint, made safe to print on a terminal: one function, used everywhere.

Tensor names, file names and messages that quote them come from files anyone may have
crafted. Printed raw, an ANSI escape recolours or clears the terminal, a newline forges a
line of its own (`valid: ...` under an INVALID verdict), a bidi override reorders what the
reader sees, and a 200,000-character name fills the screen (or a log) with one line.
`printable` writes every such character as a Python-style escape and caps the length;
`--json` output needs none of this (json.dumps escapes control characters itself).
"""

from __future__ import annotations

MAX_PRINTED_CHARS = 2000  # one printed line; real tensor names and paths are far shorter


def _escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def printable(text: object, limit: int = MAX_PRINTED_CHARS) -> str:
    """`text` with every character str.isprintable() rejects (controls, escapes, line and paragraph
    separators, bidi and other format characters, unassigned code points) written as `\\x1b`,
    `\\u202e`, ..., cut to `limit` characters (its start and end, with a note of how many were left
    out between them)."""
    text = str(text)
    cut = max(0, len(text) - limit)
    if cut:  # keep both ends: a path leads an error line and the reason closes it
        text = f"{text[: limit // 2]}…(+{cut} chars)…{text[len(text) - (limit - limit // 2) :]}"
    if not text.isprintable():
        text = "".join(c if c.isprintable() else _escape(c) for c in text)
    return text


__all__ = ["MAX_PRINTED_CHARS", "printable"]
