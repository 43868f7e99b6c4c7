"""The shell's `$(( ... ))` integer arithmetic, as verl's launch scripts use it for lengths
(`max_response_length=$((1024 * 8))`, `$(( (prompt + response) * 2 ))`), worked out without
running anything: integers, + - * / %, parentheses and names of the script's variables only
(`$N` or, as bash allows inside arithmetic, plain `N`), spaces anywhere between them.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable, Mapping

# `$((...))` with parentheses nested up to NESTING deep inside (`$(( ((a + b)) * 2 ))`); a
# deeper one is not matched, and stays text
NESTING = 3
_INSIDE = "[^()]"
for _ in range(NESTING):
    _INSIDE = rf"(?:[^()]|\({_INSIDE}*\))"
ARITHMETIC = re.compile(rf"\$\(\(({_INSIDE}*)\)\)")
MAX_EXPRESSION_CHARS = 200  # a launch script's sums are a few dozen characters
_LIMIT = 1 << 63  # bash's integers are 64-bit; a larger value is not one it would print
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BLANKS = re.compile(r"[ \t\n]+")  # what bash skips between the tokens of arithmetic


def _truncating_division(left: int, right: int) -> int:
    """bash divides toward zero (-7 / 2 is -3), Python's // toward minus infinity."""
    quotient = abs(left) // abs(right)
    return quotient if (left < 0) == (right < 0) else -quotient


def _truncating_remainder(left: int, right: int) -> int:
    return left - right * _truncating_division(left, right)


_BINARY: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: _truncating_division,
    ast.Mod: _truncating_remainder,
}


def evaluate(expression: str, variables: Mapping[str, str]) -> int | None:
    """The value of `expression` (the text between `$((` and `))`), names read from
    `variables`; None where it is anything else (an unknown name, `**`, a division by zero,
    a value beyond 64 bits), which the caller keeps as text."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        return None
    unknown = False

    def value_of(match: re.Match) -> str:
        nonlocal unknown
        value = variables.get(match.group(0), "").strip()
        unknown = unknown or not re.fullmatch(r"-?[0-9]{1,18}", value)
        return f"({value})"

    # bash skips blanks anywhere (`$(( 3 * 5 ))`); Python read a leading one as an indent
    text = _NAME.sub(value_of, _BLANKS.sub(" ", expression).strip(" "))
    if unknown:
        return None
    try:
        return _value(ast.parse(text, mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError):
        return None


def _value(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        result = node.value
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        result = -_value(node.operand) if isinstance(node.op, ast.USub) else _value(node.operand)
    elif isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        result = _BINARY[type(node.op)](_value(node.left), _value(node.right))
    else:
        raise ValueError("not integer arithmetic")
    if abs(result) >= _LIMIT:
        raise ValueError("beyond 64 bits")
    return result
