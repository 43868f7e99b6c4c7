"""bash's brace expansion of a command's words, for `mfsdp config from-verl`: bash turns an
unquoted `pre{a,b}post` into the words `preapost` and `prebpost`, and `{1..3}` into `1 2 3`,
before it expands any variable; Hydra then keeps the last of several values for one key.
Read as one word, `optim.lr={1e-6,2e-6}` became a YAML mapping and no lr at all, and
`data.train_files=/d/{train,test}.parquet` the literal path, where verl reads
`/d/test.parquet`.

A word comes marked (`shell_quoting.mark`: a quoted or escaped `{`, `,` or `}` is a
`QUOTED_BRACE_CHARS` mark), so each plain one here is one bash reads. As bash does: the
first `{` with a matching `}` holding a comma outside nested braces, or a sequence
(`{1..10..3}`, `{01..03}`, `{a..e}`), is expanded, its pieces and the text after it in turn;
a `{` that opens neither (`{x}`, `{}`) stays text; `${...}`, `$(...)` and backquotes are
expansions of their own, whose braces are none of this.
"""

from __future__ import annotations

import itertools
import re

from trainer import shell_quoting
from trainer.shell_variables import ExpansionTooLarge

MAX_WORDS = 1 << 12  # the words one written word may become: far past any launch's
_SEQUENCE = re.compile(r"(-?[0-9]+|[A-Za-z])\.\.(-?[0-9]+|[A-Za-z])(?:\.\.(-?[0-9]+))?")
_PADDED = re.compile(r"-?0[0-9]")  # an end written with a leading zero pads the sequence
_CLOSES = {"${": "}", "$(": ")"}  # an expansion whose own brackets are skipped (`_skip`)


class TooManyWords(ExpansionTooLarge):
    """A word whose braces make more than `MAX_WORDS` words; names the word."""


def expanded_words(word: str) -> list[str]:
    """The words bash makes of the written `word` (a `shell_quoting.Word` keeps where its
    unquoted expansions stand, for each word made of it); `[word]` where it holds none."""
    if "{" not in word:
        return [word]
    unquoted = getattr(word, "unquoted", ())
    text = "".join(
        shell_quoting.UNQUOTED_EXPANSION * (at in unquoted) + char for at, char in enumerate(word)
    )
    made = _expand(text, word)
    if made == [text]:
        return [word]
    return [shell_quoting.unmarked_word(item) for item in made]


def _expand(text: str, word: str) -> list[str]:
    """Each word the first brace expression in `text` makes, the text after it expanded in
    turn, as bash orders them (`a{1,2}{x,y}`: a1x a1y a2x a2y)."""
    found = _first_expression(text)
    if found is None:
        return [text]
    start, end, items = found
    tails = _expand(text[end:], word)
    made: list[str] = []
    for item in items:
        for middle in _expand(item, word):
            made += [text[:start] + middle + tail for tail in tails]
            if len(made) > MAX_WORDS:
                raise TooManyWords(
                    f"{shell_quoting.literal(word)}: bash's brace expansion makes more than"
                    f" {MAX_WORDS} words of it; not a launch script"
                )
    return made


def _first_expression(text: str) -> tuple[int, int, list[str]] | None:
    """The first brace expression of `text`: where its `{` stands, the index after its `}`,
    and the pieces it expands to; None if it holds none."""
    index = 0
    while index < len(text):
        skipped = _skip(text, index)
        if skipped is not None:
            index = skipped
            continue
        if text[index] == "{":
            found = _expression_at(text, index)
            if found is not None:
                return found
        index += 1
    return None


def _expression_at(text: str, start: int) -> tuple[int, int, list[str]] | None:
    """The brace expression whose `{` is at `start`: its pieces, split at the commas outside
    nested braces, or its sequence; None where its `{` has no `}` or opens neither."""
    depth, index, commas = 0, start, []
    while index < len(text):
        skipped = _skip(text, index)
        if skipped is not None:
            index = skipped
            continue
        char = text[index]
        depth += (char == "{") - (char == "}")
        if char == "," and depth == 1:
            commas.append(index)
        if depth == 0:
            bounds = [start, *commas, index]
            if commas:
                items = [text[left + 1 : right] for left, right in itertools.pairwise(bounds)]
                return start, index + 1, items
            sequence = _sequence(text[start + 1 : index])
            return None if sequence is None else (start, index + 1, sequence)
        index += 1
    return None


def _sequence(inside: str) -> list[str] | None:
    """The words of a sequence expression's text (`1..5`, `05..1..2`, `a..e`): both ends
    numbers or both one letter, stepping by the increment's size (1 if none or 0) from
    the first end towards the second; a number written with a leading zero pads all to
    the width of the longer end. None for any other text."""
    match = _SEQUENCE.fullmatch(inside)
    if match is None:
        return None
    first, last, increment = match.groups()
    step = abs(int(increment)) if increment else 1
    step = step or 1
    if first.isalpha() != last.isalpha():
        return None
    low, high = (ord(first), ord(last)) if first.isalpha() else (int(first), int(last))
    count = abs(high - low) // step + 1
    if count > MAX_WORDS:
        raise TooManyWords(f"{{{inside}}}: bash's brace expansion makes {count} words of it")
    direction = 1 if high >= low else -1
    values = [low + direction * step * at for at in range(count)]
    if first.isalpha():
        return [chr(value) for value in values]
    padded = _PADDED.match(first) or _PADDED.match(last)
    width = max(len(first), len(last)) if padded else 0
    return [f"{value:0{width}d}" for value in values]


def _skip(text: str, index: int) -> int | None:
    """The index after the `${...}`, `$(...)` or backquoted text starting at `index`
    (brackets nested in it counted), None if none starts there."""
    opener = text[index : index + 2]
    if opener in _CLOSES:
        opening, closing, depth = opener[1], _CLOSES[opener], 0
        for at in range(index + 1, len(text)):
            depth += (text[at] == opening) - (text[at] == closing)
            if depth == 0:
                return at + 1
        return len(text)
    if text[index] == "`":
        end = text.find("`", index + 1)
        return len(text) if end < 0 else end + 1
    return None
