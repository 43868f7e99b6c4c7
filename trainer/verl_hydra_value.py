"""The value of one override on a verl command line, read by Hydra's override grammar
(hydra/grammar/OverrideLexer.g4 and OverrideParser.g4, Hydra 1.3), not by YAML: verl's
command line is Hydra's. The two differ where it matters: `{enable_thinking:false}` is a
Hydra mapping (YAML: one key `enable_thinking:false`), `a,b` outside brackets is a sweep
Hydra refuses without --multirun (YAML: the text), and `#`, `!`, `&`, `;`, `<`, `>`, `^`,
backtick, `~` and any letter outside ASCII stop Hydra's lexer unless quoted (YAML: a
comment, or text). A value Hydra refuses is refused here as verl would fail on it.
A module of its own: a grammar, apart from how bash builds the word.
"""

from __future__ import annotations

import re
from typing import Any

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.errors import MfsdpUsageError

# VALUE_MODE's tokens, in the grammar's order: the longest match wins, the first on a tie
_WS = r"[ \t]"
_INT_UNSIGNED = r"(?:0|[1-9](?:_?[0-9])*)"
_POINT_FLOAT = rf"(?:{_INT_UNSIGNED}?\.[0-9](?:_?[0-9])*|{_INT_UNSIGNED}\.)"
_EXPONENT_FLOAT = rf"(?:{_INT_UNSIGNED}|{_POINT_FLOAT})[eE][+-]?[0-9](?:_?[0-9])*"
_TOKENS = [
    (kind, re.compile(pattern))
    for kind, pattern in (
        ("POPEN", rf"{_WS}?\({_WS}?"),
        ("COMMA", rf"{_WS}?,{_WS}?"),
        ("PCLOSE", rf"{_WS}?\)"),
        ("BRACKET_OPEN", rf"\[{_WS}?"),
        ("BRACKET_CLOSE", rf"{_WS}?\]"),
        ("BRACE_OPEN", rf"\{{{_WS}?"),
        ("BRACE_CLOSE", rf"{_WS}?\}}"),
        ("COLON", rf"{_WS}?:{_WS}?"),
        ("EQUAL", rf"{_WS}?={_WS}?"),
        ("FLOAT", rf"[+-]?(?:{_EXPONENT_FLOAT}|{_POINT_FLOAT}|[Ii][Nn][Ff]|[Nn][Aa][Nn])"),
        ("INT", rf"[+-]?{_INT_UNSIGNED}"),
        ("BOOL", r"[Tt][Rr][Uu][Ee]|[Ff][Aa][Ll][Ss][Ee]"),
        ("NULL", r"[Nn][Uu][Ll][Ll]"),
        ("UNQUOTED_CHAR", r"[/\-\\+.$%*@?|]"),
        ("ID", r"[a-zA-Z_][a-zA-Z0-9_\-]*"),
        ("ESC", r"(?:\\\\|\\[()\[\]{}:=, \t])+"),
        ("WS", rf"{_WS}+"),
        # Hydra's: nothing, or an even run of backslashes, or text ending in a character
        # that is no backslash then an even run, between the quotes; so `'a\'` is unclosed
        *(("QUOTED_VALUE", rf"{q}(?:(?:\\\\)*|[\s\S]*?[^\\](?:\\\\)*){q}") for q in "\"'"),
        ("INTERPOLATION", r"\$\{[^}]+\}"),
    )
]
# the tokens a primitive (or a mapping's key: not QUOTED_VALUE, INTERPOLATION, COLON) is made of
_PRIMITIVE = frozenset(
    {"ID", "NULL", "INT", "FLOAT", "BOOL", "INTERPOLATION", "UNQUOTED_CHAR", "COLON", "ESC", "WS"}
)
_KEY = _PRIMITIVE - {"INTERPOLATION", "COLON"}
# nesting deeper than any config: a value of a million `[` would exhaust Python's stack
MAX_DEPTH = 64
MAX_INT_DIGITS = 4300  # Python's own bound on turning text into an int


class HydraValueError(MfsdpUsageError, ValueError):
    """The value is one Hydra refuses on verl's command line, so verl does not start; the
    message says why and how to write it, without naming the key (the caller does)."""


def hydra_override_value(text: str) -> Any:
    """`text` (what follows `key=` in one word verl receives) as Hydra makes it: a mapping,
    a list, or a scalar typed by Hydra's tokens (`1e-6` a float, `0x10` and `yes` text),
    quoted text unquoted; HydraValueError for what Hydra refuses."""
    # the blanks after `=` belong to Hydra's EQUAL token, before any value (a quoted one too)
    reader = _Reader(_tokens(text.lstrip(" \t")), text)
    value = reader.element(0)
    if reader.peek() == "COMMA":
        raise HydraValueError(
            f"{cut_to(repr(text), 80)}: a comma outside brackets makes it a Hydra sweep, which"
            ' verl\'s command refuses ("Ambiguous value"): write'
            f" [{cut_to(text, 80)}] for a list, or quote the value ('...') for its text"
        )
    if reader.peek() is not None:
        raise HydraValueError(_unexpected(text, reader.tokens[reader.at][1]))
    return value


def _tokens(text: str) -> list[tuple[str, str]]:
    """`text` as VALUE_MODE's tokens (kind, text); HydraValueError at a character no token
    takes (Hydra's "token recognition error")."""
    found: list[tuple[str, str]] = []
    at = 0
    while at < len(text):
        best: tuple[str, str] | None = None
        for kind, pattern in _TOKENS:
            match = pattern.match(text, at)
            if match and match.end() > at and (best is None or len(match[0]) > len(best[1])):
                best = (kind, match[0])
        if best is None:
            raise HydraValueError(
                f"{cut_to(repr(text), 80)}: Hydra refuses {text[at]!r} outside quotes (token"
                " recognition error), so verl does not start; quote the value ('...') for its text"
            )
        found.append(best)
        at += len(best[1])
    return found


def _unexpected(text: str, token: str | None) -> str:
    """Hydra's parse error in one line: the token it stopped at, or an unclosed bracket."""
    where = (
        "ends before its bracket or brace is closed"
        if token is None
        else f"cannot be read by Hydra at {token.strip()!r} (a bracket, brace or parenthesis"
        " out of place)"
    )
    return (
        f"{cut_to(repr(text), 80)} {where}, so verl does not start; quote the value ('...') for"
        " its text"
    )


class _Reader:
    """Hydra's parser rules over the tokens: element (primitive, list, mapping), one at a
    time from `at`."""

    def __init__(self, tokens: list[tuple[str, str]], text: str) -> None:
        self.tokens = tokens
        self.text = text
        self.at = 0

    def peek(self) -> str | None:
        return self.tokens[self.at][0] if self.at < len(self.tokens) else None

    def take(self, kind: str) -> str:
        if self.peek() != kind:
            shown = self.tokens[self.at][1] if self.at < len(self.tokens) else None
            raise HydraValueError(_unexpected(self.text, shown))
        self.at += 1
        return self.tokens[self.at - 1][1]

    def element(self, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise HydraValueError(f"{cut_to(repr(self.text), 80)}: nested deeper than {MAX_DEPTH}")
        kind = self.peek()
        if kind == "BRACKET_OPEN":
            return self._list(depth)
        if kind == "BRACE_OPEN":
            return self._mapping(depth)
        if (
            kind == "ID"
            and self.at + 1 < len(self.tokens)
            and self.tokens[self.at + 1][0] == "POPEN"
        ):
            raise HydraValueError(
                f"{cut_to(repr(self.text), 80)}: a Hydra function (a sweep or a cast), not read"
                " here; write the value itself"
            )
        if kind == "QUOTED_VALUE":
            return _unquoted(self.take(kind))
        return self._primitive(_PRIMITIVE)

    def _primitive(self, kinds: frozenset[str]) -> Any:
        start = self.at
        while self.peek() in kinds:
            self.at += 1
        parts = self.tokens[start : self.at]
        if not parts:
            shown = self.tokens[self.at][1] if self.at < len(self.tokens) else None
            raise HydraValueError(_unexpected(self.text, shown))
        solid = [(kind, text) for kind, text in parts if kind != "WS"]
        if len(solid) == 1:
            return _typed(*solid[0])
        while parts[-1][0] == "WS":  # blanks around it are Hydra's to trim, not escaped ones
            parts = parts[:-1]
        while parts[0][0] == "WS":
            parts = parts[1:]
        return "".join(_unescaped(kind, text) for kind, text in parts)

    def _list(self, depth: int) -> list[Any]:
        self.take("BRACKET_OPEN")
        items: list[Any] = []
        if self.peek() != "BRACKET_CLOSE":
            items.append(self.element(depth + 1))
            while self.peek() == "COMMA":
                self.take("COMMA")
                items.append(self.element(depth + 1))
        self.take("BRACKET_CLOSE")
        return items

    def _mapping(self, depth: int) -> dict[Any, Any]:
        self.take("BRACE_OPEN")
        mapping: dict[Any, Any] = {}
        while self.peek() != "BRACE_CLOSE":
            if mapping:
                self.take("COMMA")
            key = self._primitive(_KEY)
            self.take("COLON")
            mapping[key] = self.element(depth + 1)
        self.take("BRACE_CLOSE")
        return mapping


def _typed(kind: str, text: str) -> Any:
    """A primitive of one token as Hydra types it; any other is its text."""
    if kind == "INT":
        digits = text.lstrip("+-").replace("_", "")
        if len(digits) > MAX_INT_DIGITS:
            raise HydraValueError(f"{cut_to(text, 40)}: an integer of over {MAX_INT_DIGITS} digits")
        return int(digits) * (-1 if text.startswith("-") else 1)
    if kind == "FLOAT":
        return float(text.replace("_", ""))
    if kind == "BOOL":
        return text.lower() == "true"
    if kind == "NULL":
        return None
    return _unescaped(kind, text)


def _unquoted(quoted: str) -> str:
    """A QUOTED_VALUE's text as Hydra unescapes it: only a run of backslashes right before
    a quote character is an escape, each pair one backslash and an odd one the quote
    (`"x\\\\\\"y"` is `x\\"y`, `'a\\\\'` is `a\\`); any other backslash is text."""
    escapes = re.compile(r"\\+" + quoted[0])
    body = escapes.sub(lambda run: run[0][1::2], quoted[1:])
    # the closing quote: taken by the escape run before it, or stripped here
    return body if quoted[-2] == "\\" else body[:-1]


def _unescaped(kind: str, text: str) -> str:
    """An ESC token's characters without their backslashes (`\\,` is `,`)."""
    return re.sub(r"\\(.)", r"\1", text) if kind == "ESC" else text
