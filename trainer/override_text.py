"""What YAML would change in the text of a `key=value` override, and how to quote a value so
that it reads back exactly.

An override's value is read as YAML (so `[a,b]` is a list and `2e-5` a number), and YAML
silently drops or folds some text: `trainer.run_dir='exp/a #second try'` was `exp/a` (a
comment), so the run resumed the one already there; `$'r\\nx'` wrote to `r x/` (a line
folded); `'r3 '` wrote to `r3/` (the spaces around a plain value trimmed); `...` was
nothing (a document marker). Hydra, whose overrides verl users know, refuses an unquoted `#`
outright. Such a value is refused, naming the key; quoted (`key='a #b'`, `key="r3 "`) it
reads as the text inside the quotes, which `quoted` writes for any text.
"""

from __future__ import annotations

import unicodedata

import yaml

from trainer.shown_value import shown_value

# Categories YAML folds or refuses rather than keep as written: control characters (a
# newline, a tab, NEL) and the Unicode line and paragraph separators.
_FOLDED_CATEGORIES = ("Cc", "Zl", "Zp")
# Tokens whose text is markup YAML drops from the value: a document start or end, a
# directive.
_DROPPED_TOKENS = (yaml.DocumentStartToken, yaml.DocumentEndToken, yaml.DirectiveToken)
# How long a quoted value an error writes out whole (a longer one is shown as "...").
_SHOWN_QUOTED = 80


def folded_character(text: str) -> str | None:
    """The first character of `text` that YAML folds or refuses, as an escape (`\\n`), or
    None."""
    for char in text:
        if unicodedata.category(char) in _FOLDED_CATEGORIES:
            return repr(char)[1:-1]
    return None


def dropped_text(text: str) -> str | None:
    """The first run of `text` that YAML drops from the value (a comment, a document marker),
    or None when every character outside spaces is part of the value (or when
    YAML cannot read it at all, which the parse itself reports). For one line without
    control characters (`folded_character` first)."""
    kept = [False] * len(text)
    dropped = [False] * len(text)
    try:
        for token in yaml.scan(text, Loader=yaml.SafeLoader):
            marks = dropped if isinstance(token, _DROPPED_TOKENS) else kept
            for index in range(token.start_mark.index, token.end_mark.index):
                marks[index] = True
    except yaml.YAMLError:
        return None
    start = next(
        (i for i, char in enumerate(text) if dropped[i] or (char != " " and not kept[i])), None
    )
    if start is None:
        return None
    end = start
    while end < len(text) and not kept[end]:
        end += 1
    return text[start:end].rstrip(" ")


def quoted(text: str) -> str:
    """`text` as a YAML double-quoted scalar that reads back as exactly `text`, whatever it
    holds (a path with `#`, edge spaces, a newline): `\\` and `"` escaped, and every
    character YAML would fold or refuse written as its `\\u` escape."""
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif unicodedata.category(char) in (*_FOLDED_CATEGORIES, "Cs") or char == "\ufeff":
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def folded_or_trimmed(key: str, text: str, trims_text: bool = True) -> str | None:
    """Why YAML would fold or trim `text`, given as `key=text` (a control character, spaces
    at its start or end), in words that say how to quote it; or None. Checked before YAML
    reads the text: PyYAML folds some control characters and refuses others in words of its
    own. Edge spaces matter only where they would be part of a text value (`trims_text`: a
    key that takes text only, a path or a name): elsewhere they change nothing, as around
    the key (`trainer.total_steps= 5` is 5, as Hydra reads it too), and the advice to quote
    them made a number the text " 5", refused."""
    folded = folded_character(text)
    if folded is not None:
        return (
            f"command-line override {key}: the value holds a control character ({folded}),"
            " which YAML folds or refuses; leave it out, or quote the value with it escaped"
            f' ({key}="...{folded}...")'
        )
    if trims_text and text != text.strip(" "):
        return (
            f"command-line override {key}: the value has spaces at its start or end, which"
            f" YAML drops; quote the value to keep them ({key}={_written(text)}) or remove"
            " them"
        )
    return None


def dropped_markup(key: str, text: str) -> str | None:
    """Why YAML would drop part of `text`, given as `key=text` (a comment, a document
    marker), in words that say how to quote it; or None. Checked once YAML has read the
    text under its bounds: scanning a value nested thousands deep again took seconds."""
    dropped = dropped_text(text)
    if dropped is None:
        return None
    what = "a comment" if dropped.startswith("#") else "a document marker"
    return (
        f"command-line override {key}: YAML reads {shown_value(dropped)} as {what} and drops"
        f" it; quote the value to keep it whole ({key}={_written(text)}, inside shell quotes)"
    )


def _written(text: str) -> str:
    """`text` quoted, for an error line: whole when short, else `"..."`."""
    return quoted(text) if len(text) <= _SHOWN_QUOTED else '"..."'
