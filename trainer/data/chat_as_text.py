"""A prompt cell holding chat turns written out as text: refused.

A CSV round trip or pandas' `df.astype(str)` turns a `prompt` cell's list of
{role, content} turns into text: their JSON (`[{"role": "user", ...}]`), their Python
repr (`[{'role': 'user', ...}]`), or, where pandas held the cell as a numpy array (as it
does a parquet list column), numpy's text of that array: `str()` parts the turns with
spaces and line breaks and no comma, `repr()` wraps them in `array([...], dtype=object)`,
a list nested in a turn is written as such an `array(...)`, and an array of over 1,000
turns is cut to its ends around `...`. A CSV file quotes any of these (`"[{""role"": ...`),
and a reader that keeps the quotes hands that on. Read as a plain text prompt, any of them
became one user turn and the policy was asked the literal brackets and keys, exit 0; verl
hands such a cell to the chat template as it is, which is no chat either. The same mistake
in an SFT `messages` column was already refused (a string is no list of turns). A text is
refused only when it parses as a list of {role, content} dicts: a plain prompt that starts
with `[` or holds braces reads. Every row is looked at, so what is parsed is bounded before
it is (the limits below): a text that is no chat, of any size or nesting, reads as a prompt
at the cost of a scan linear in its length. Nothing is evaluated: numpy's `array(...)` is
read as the list it holds, not called.
"""

from __future__ import annotations

import ast
import io
import json
import keyword
import re
import tokenize
from collections.abc import Iterator
from itertools import accumulate, pairwise
from typing import Any

from mfsdp_ckpt.check.printable import cut_to

# What is parsed is bounded before parsing, as every row pays for it. Each form refused starts
# (its spaces stripped) as a list or numpy's repr of an array, CSV-quoted or not, and ends as
# one (`]`, `)`, or a CSV field's quote); what follows its opening is what can start a turn
# (`_FIRST_ITEM`): a text shaped otherwise (`[1, 2] sort these`, `[Note] ...`) is a prompt,
# read without scanning it. A chat written out names its keys quoted (json.dumps and repr
# write `"role"`, `'role'`, a CSV file `""role""`): a text without both is a prompt, read
# without parsing it.
_TURN_KEYS = tuple(re.compile(rf"""["']{key}["']""") for key in ("role", "content"))
# A list, or numpy's repr of an array; a CSV field's quotes are taken off first
_WRITTEN_LIST = re.compile(r"(\[|array\().*[\])]", re.DOTALL)
_WRITTEN_ENDS = ("]", ")", '"')  # what _WRITTEN_LIST or a CSV field closes
# What the first non-space character after each opening may be where the text is a list of
# turns as JSON, a literal or numpy's text: a turn's `{` (in parentheses, or in numpy's
# `array(` that is read as what it holds: the name), numpy's cut `...`; after `array(` its
# list. A comment or a line continuation may come first in a literal.
_BEFORE_CODE = frozenset("#\\")
_LIST_FIRST = frozenset({*"{(.", "array"}) | _BEFORE_CODE
_ARRAY_FIRST = frozenset("[(") | _BEFORE_CODE
_FIRST_ITEM = {"[": _LIST_FIRST, "array(": _ARRAY_FIRST, '"[': _LIST_FIRST, '"array(': _ARRAY_FIRST}
# the first character not a space, or the name `array` (a word: `[and ...` is prose), in place
_NEXT_ITEM = re.compile(r"\s*(array\b|\S)")
# Python's parser holds ~500 bytes per token of a literal (a 6 MB `[1,1,...]` took 2.9 GB and
# 41 s), json less but also per value: a text is parsed only when it has at most this many
# tokens (~10 MB parsed), nested at most _MAX_DEPTH deep, and every token one a literal, JSON
# or numpy's text of an array is written with. Past ~200 levels (brackets and signs) Python
# 3.11's parser raises MemoryError, no different from the machine's, and so does a long run of
# unary signs (`[------1]`) or keywords (`[not not ... 1]`): none is parsed. A name that is no
# keyword (numpy's `array`, `dtype`, `object`) is one token that nests nothing. A chat of more
# tokens (some thousands of turns) reads as a prompt; a turn's text is one token, however long.
# The scan itself pays per line as well (4 M line breaks, which make no token counted, took
# 13 s), so a text of more lines than tokens allowed is not scanned: each line of a chat any
# of these writers leaves holds a token (a turn's line breaks are written escaped). Lines
# holding nothing but whitespace are dropped first (`_LINE_BREAKS`, one pass): they hold no
# token of any of these forms, and a chat padded with 20,000 of them read as a prompt.
_MAX_TOKENS = 20_000
# what is made one \n: line breaks (\n, \r\n or \r) with nothing between them but
# whitespace, whatever str.strip() removes (lines of form feeds, vertical tabs or other
# unicode spaces hid a chat as lines of spaces did), and a lone \r\n or \r: the tokenizer
# and the line count know \n alone, and a chat written with \r read as a prompt
_LINE_BREAKS = re.compile(r"(?:\r\n?|\n)(?:[^\S\r\n]*+(?:\r\n?|\n))++|\r\n?")
_MAX_DEPTH = 100
_LITERAL_KEYWORDS = frozenset({"True", "False", "None"})
_LITERAL_OPS = frozenset({*"[]{}(),:+-=", "..."})
_OPENING, _CLOSING, _SIGNS = frozenset("[{("), frozenset("]})"), frozenset("+-")
_VALUE_TOKENS = frozenset({tokenize.NAME, tokenize.NUMBER, tokenize.STRING})
# between tokens: not the previous token a sign follows
_SPACING_TOKENS = frozenset(
    {tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT}
    | {tokenize.ENDMARKER}
)
_UNTOKENIZED = (tokenize.TokenError, SyntaxError)  # an unclosed string or bracket
# numpy's `str()` of an array parts its items with spaces alone: a turn's `}` or the cut's
# `...`, then the next turn's `{` or the cut
_ITEM_END, _ITEM_START = frozenset({"}", "..."}), frozenset({"{", "..."})
# What the parsers raise on a text that is no literal or no JSON: json's RecursionError on
# deep nesting, literal_eval's TypeError on an unhashable key, the rest their own errors
_NOT_PARSED = (ValueError, SyntaxError, TypeError, RecursionError)
_NUMPY = "numpy's text of an array"
_ARRAY_KEYWORDS = frozenset({"dtype", "shape"})


def chat_written_as_text(text: str, column: str) -> str | None:
    """Why the text prompt `text` of `column` cannot train (chat turns written out as JSON, as
    a Python literal or as numpy's text of an array, CSV-quoted or not, which form named), or
    None when it is a prompt to read as text."""
    stripped = text.strip()
    if not _shaped_as_written(stripped):
        return None
    if not all(key.search(stripped) for key in _TURN_KEYS):
        return None
    lines = _LINE_BREAKS.sub("\n", stripped)  # after the checks above, which they pass alike
    form = next(
        filter(None, (_parsed_form(field, where) for where, field in _unquoted(lines))), None
    )
    if form is None:
        return None
    return (
        f"'{column}' is text holding chat turns written out as {form}"
        f" ({cut_to(repr(text), 80)}), not the turns: store the list of"
        " {role, content} turns itself (a CSV round trip or astype(str) writes"
        " them as text)"
    )


def _shaped_as_written(text: str) -> bool:
    """Whether the stripped `text` is shaped as a list of turns written out, told from its
    ends alone: it opens as a list or numpy's repr of an array (CSV-quoted or not), what
    follows the opening can start one (`_FIRST_ITEM`), and it closes as one. Every form
    refused is so shaped; a prompt that merely starts with `[` is read without a scan."""
    if not text.endswith(_WRITTEN_ENDS):
        return False
    opening = next((start for start in _FIRST_ITEM if text.startswith(start)), None)
    if opening is None:
        return False
    first = _NEXT_ITEM.match(text, len(opening))
    return first is not None and first[1] in _FIRST_ITEM[opening]


def _unquoted(text: str) -> Iterator[tuple[str, str]]:
    """`text` as it is (""), then, where it has a CSV field's quotes (around it, or doubled
    inside it), the field they quote (" in CSV quotes"): one level, what one CSV round trip
    leaves."""
    yield "", text
    quoted = len(text) > 1 and text[0] == text[-1] == '"'
    if quoted or '""' in text:
        yield " in CSV quotes", (text[1:-1] if quoted else text).replace('""', '"')


def _parsed_form(text: str, where: str) -> str | None:
    """The form (`JSON`, `a Python literal`, numpy's text of an array, then `where`) in which
    `text` parses as chat turns, or None. Text that parses as JSON is not parsed again as a
    literal: JSON's value is the one."""
    if not _WRITTEN_LIST.fullmatch(text) or (commas := _missing_commas(text)) is None:
        return None
    try:
        return f"JSON{where}" if _is_turns(json.loads(text)) else None
    except _NOT_PARSED:
        pass
    text = _with_commas(text, commas)
    try:
        tree = ast.parse(text, mode="eval").body
        numpy = bool(commas) or _has_arrays(tree)
        value = ast.literal_eval(_without_numpy(tree) if numpy else tree)
    except _NOT_PARSED:
        return None
    form = _NUMPY if numpy else "a Python literal"
    return f"{form}{where}" if _is_turns(value) else None


def _missing_commas(text: str) -> list[int] | None:
    """The offsets in `text` where numpy's `str()` of an array left out the comma between two
    items (only spaces and line breaks between them), or None when `text` is out of bounds:
    its tokens not all ones a literal, JSON or numpy's text is written with, more than
    _MAX_TOKENS of them or of its lines, nested over _MAX_DEPTH deep, or a sign after a sign.
    Read one token at a time, so a text of too many costs no more than that many."""
    if text.count("\n") >= _MAX_TOKENS:
        return None
    line_starts = [0, *accumulate(len(line) + 1 for line in text.split("\n"))]
    commas: list[int] = []
    depth, count, previous, end = 0, 0, "", 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type in _SPACING_TOKENS:
                continue
            count += 1
            if count > _MAX_TOKENS:
                return None
            word = token.string
            if keyword.iskeyword(word) and word not in _LITERAL_KEYWORDS:
                return None
            if token.type == tokenize.OP:
                if word not in _LITERAL_OPS or (word in _SIGNS and previous in _SIGNS):
                    return None
                depth += (word in _OPENING) - (word in _CLOSING)
                if depth > _MAX_DEPTH:
                    return None
                if word in _ITEM_START and previous in _ITEM_END:
                    commas.append(end)
            elif token.type not in _VALUE_TOKENS:
                return None
            previous, (row, column) = word, token.end
            end = line_starts[row - 1] + column
    except _UNTOKENIZED:
        return None
    return commas


def _with_commas(text: str, offsets: list[int]) -> str:
    """`text` with a comma put in at each of the ascending `offsets`, in one join of its
    slices: a comma put in at a time copied the whole text each time (a 6 MB cell with
    12,000 of numpy's `...` took 52 s), where one join costs the text's length."""
    bounds = [0, *offsets, len(text)]
    return ",".join(text[start:stop] for start, stop in pairwise(bounds))


def _has_arrays(tree: ast.expr) -> bool:
    """Whether `tree` holds numpy's repr of an array, `array(...)`."""
    return any(_array_items(node) is not None for node in ast.walk(tree))


def _array_items(node: ast.AST) -> ast.expr | None:
    """What numpy's repr `array(ITEMS, dtype=..., shape=...)` of an array holds (either
    keyword may be left out; numpy writes the shape of an array it cut), or None where
    `node` is no such repr."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        return None
    if node.func.id != "array" or len(node.args) != 1:
        return None
    return node.args[0] if {k.arg for k in node.keywords} <= _ARRAY_KEYWORDS else None


class _ArraysAsLists(ast.NodeTransformer):
    """numpy's `array(ITEMS, dtype=..., shape=...)` read as ITEMS, never called; the
    keywords are dropped."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        items = _array_items(node)
        return node if items is None else self.visit(items)


def _without_numpy(tree: ast.expr) -> ast.expr:
    """`tree`, numpy's text of an array, as the literal it stands for: `array(...)` read as
    the list it holds, and the `...` where numpy cut a long array's middle left out of the
    turns. A `...` elsewhere is kept: no chat holds one."""
    tree = _ArraysAsLists().visit(tree)
    if isinstance(tree, ast.List):
        tree.elts = [
            item
            for item in tree.elts
            if not (isinstance(item, ast.Constant) and item.value is Ellipsis)
        ]
    return tree


def _is_turns(value: Any) -> bool:
    """Whether `value` is a non-empty list whose every item is a dict with a role and a
    content: the shape of a chat. A role or content that is `...` is a template's
    (`[{"role": ..., "content": ...}]`), not a chat's."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(
            isinstance(turn, dict)
            and {"role", "content"} <= turn.keys()
            and Ellipsis not in turn.values()
            for turn in value
        )
    )
