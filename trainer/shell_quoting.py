"""bash's quoting forms that Python's shlex does not know, marked in a logical line before
shlex splits it into words, for `mfsdp config from-verl`.

shlex reads `$'a\\nb'` as `$` and the single-quoted `a\\nb`: the value arrived as the text
`$a\\nb` (and `NAME=$'x\\nmodel:\\n  path: /etc'` became a YAML mapping), where bash makes it
"a", a newline, "b". `$"text"` (bash's translated string: the text itself, absent a
translation) arrived as `$text`, a reference to another variable; `\\$V` (unquoted or in
double quotes, a literal `$V` to bash) was substituted as if unescaped. Here `$"..."` is
read as "..." and an escaped or single-quoted `$` as a literal one (`LITERAL_DOLLAR`, which
`literal` turns back into `$` once values are made). `$'...'` is marked `ANSI_C` and its text
dropped: decoding its escapes as bash does (octal, hex, Unicode, control characters, a NUL
that ends the string) is more than a launch script needs, so a value that holds one is
refused, naming the variable, and an assignment nobody uses (`IFS=$'\\n\\t'`) costs nothing.
"""

from __future__ import annotations

LITERAL_DOLLAR = "\ue001"  # a `$` bash passes as it is (single-quoted or escaped)
ANSI_C = "\ue002"  # where a `$'...'` string stood
_MARKS = LITERAL_DOLLAR + ANSI_C


def mark(line: str) -> str:
    """`line` with single-quoted and escaped dollars marked literal, `$"..."` as "...", and
    each `$'...'` replaced by ANSI_C; any of the marks already in it are dropped."""
    line = line.translate({ord(char): None for char in _MARKS})
    out: list[str] = []
    quote = ""
    index, size = 0, len(line)
    while index < size:
        char = line[index]
        if quote == "'":
            quote = "" if char == "'" else quote
            out.append(LITERAL_DOLLAR if char == "$" else char)
        elif char == "\\" and index + 1 < size:
            escaped = line[index + 1]
            out.append(LITERAL_DOLLAR if escaped == "$" else line[index : index + 2])
            index += 2
            continue
        elif quote:
            quote = "" if char == quote else quote
            out.append(char)
        elif line.startswith("$'", index):
            out.append(ANSI_C)
            index = _ansi_c_end(line, index + 2)
            continue
        elif line.startswith('$"', index):
            index += 1  # the translated string is the text itself: read as "..."
            continue
        else:
            quote = char if char in "'\"" else ""
            out.append(char)
        index += 1
    return "".join(out)


def literal(text: str) -> str:
    """A value with its literal dollars restored (`mark`)."""
    return text.replace(LITERAL_DOLLAR, "$")


def _ansi_c_end(line: str, start: int) -> int:
    """The index after the `'` closing a `$'...'` whose text starts at `start` (a backslash
    escapes the character after it, `\\'` too); the end of the line if none does."""
    index = start
    while index < len(line):
        if line[index] == "\\":
            index += 2
        elif line[index] == "'":
            return index + 1
        else:
            index += 1
    return len(line)
