"""The shell's arithmetic expansion, `$(( ... ))` and its older form `$[ ... ]`, as verl's
launch scripts use it for lengths (`max_response_length=$((1024 * 8))`, `$(( (prompt +
response) * 2 ))`), worked out without running anything: integers, + - * / %, parentheses
and names of the script's variables only (`$N` or, as bash allows inside arithmetic, plain
`N`), spaces anywhere between them, and expansions nested inside each other to any depth
(`$(( $((a * 2)) + 1 ))`), innermost first, as bash expands them. Matched by a pattern
nested a fixed depth, a deeper sum was kept as text, and `$[ ... ]` was passed to verl as
written, which its Hydra refuses.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

# `$((...))` (its expression group 1) or `$[...]`, with parentheses and brackets nested up to
# NESTING deep inside, for finding where one may stand in a value (`verl_source`); what one
# holds and where it ends is read by `spans`, at any depth
NESTING = 6
_INSIDE = r"[^()\[\]]"
for _ in range(NESTING):
    _INSIDE = rf"(?:[^()\[\]]|\({_INSIDE}*\)|\[{_INSIDE}*\])"
ARITHMETIC = re.compile(rf"\$\(\(({_INSIDE}*)\)\)|\$\[{_INSIDE}*\]")
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


@dataclass(frozen=True)
class Span:
    """Where one arithmetic expansion stands in a text, outside any other: `start` (its `$`)
    to `end` (after its `))` or `]`), and its `expression` (the text inside)."""

    start: int
    end: int
    expression: str


def spans(text: str) -> Iterator[Span]:
    """The arithmetic expansions in `text` that no other holds, in order: each `$((` to
    the `))` that closes it, each `$[` to its `]`, as bash pairs them (nested parentheses,
    brackets and expansions inside count). A `$((` whose parentheses close as `)` alone
    (`$((cd x) && ls)`) is a command substitution, as bash reads it, and so is any `$(`:
    neither is one. One never closed is none."""
    return (span for span, _worked_out in _read(text, None))


def expand(text: str, variables: Mapping[str, str]) -> str:
    """`text` with each arithmetic expansion worked out (`evaluate`), innermost first, the
    names in it read from `variables`; one not known here (nor any holding it) is kept as
    written. A command substitution's text is never worked out: the command is not run."""
    return _replaced(text, _read(text, variables))


def as_word(text: str, word: str) -> str:
    """`text` with each arithmetic expansion no other holds (`spans`, at any depth) replaced
    by `word`: the text around them as a check reads it whatever they give
    (`verl_source.hydra_refusal`), where a pattern nested a fixed depth left a deeper `$[`
    whose brackets Hydra refused."""
    return _replaced(text, ((span, word) for span in spans(text)))


def _replaced(text: str, pieces: Iterable[tuple[Span, str]]) -> str:
    """`text` with each span of `pieces` (in order, none overlapping) replaced by its text."""
    out, at = [], 0
    for span, replacement in pieces:
        out += [text[at : span.start], replacement]
        at = span.end
    return "".join(out) + text[at:]


def _read(text: str, variables: Mapping[str, str] | None) -> Iterator[tuple[Span, str]]:
    """Each outermost arithmetic expansion of `text` (`spans`) and what it gives under
    `variables` (the text as written where it is not known, or where `variables` is None).
    Read in one pass with a stack of the expansions open, so any depth reads in linear
    time without Python's recursion."""
    # each open expansion: its kind ("((", "[", or "(" for a command substitution), where
    # it starts, the depth of the parentheses or brackets open inside it, and its text as
    # worked out so far (each expansion closed in it replaced by what it gives)
    open_: list[tuple[str, int, int, list[str]]] = []
    index, size = 0, len(text)
    while index < size:
        found = (_ACTED_ON if open_ else _OPENING).search(text, index)
        if found is None:
            break
        if open_:  # the text up to the next character acted on is the expression's
            open_[-1][3].append(text[index : found.start()])
        index = found.start()
        opener = next((opener for opener in _OPENERS if text.startswith(opener, index)), "")
        if opener:
            open_.append((opener[1:], index, 0, []))
            index += len(opener)
            continue
        if text[index] == "$":  # one that opens nothing (`$N`): the expression's text
            open_[-1][3].append("$")
            index += 1
            continue
        kind, start, depth, pieces = open_[-1]
        char, end = text[index], 0
        if char == _PAIRS[kind][0]:
            depth += 1
        elif char == _PAIRS[kind][1] and depth:
            depth -= 1
        elif char == _PAIRS[kind][1] and kind != "((":
            end = index + 1
        elif char == ")" and text.startswith("))", index):
            end = index + 2
        elif char == ")":  # `$((cd x) && ls)`: a command substitution holding a subshell
            kind = "("
        if not end:
            pieces.append(char)
            open_[-1] = (kind, start, depth, pieces)
            index += 1
            continue
        open_.pop()
        written = text[start:end]
        given = written
        if kind != "(" and variables is not None:
            value = evaluate("".join(pieces), variables)
            given = written if value is None else str(value)
        if open_:
            open_[-1][3].append(given)
        elif kind != "(":
            yield Span(start, end, written[len(kind) + 1 : -len(kind)]), given
        index = end


# what opens an expansion (the longest first) and the pairs counted inside each kind
_OPENERS = ("$((", "$[", "$(")
_OPENING = re.compile(r"\$[(\[]")  # where the next expansion may open
_ACTED_ON = re.compile(r"[$()\[\]]")  # inside one: what opens, nests or closes
_PAIRS = {"((": "()", "[": "[]", "(": "()"}


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
