"""A launch script's commands as bash reads its lines, for `mfsdp config from-verl`: one
logical line per command, without running anything.

Read as physical lines with every backslash-newline turned into a space, a script lost what
bash keeps and kept what bash drops: `name=ab\\<newline>cd` is the word `abcd` to bash (a
continuation is removed, not a space), a backslash-newline inside single quotes is kept as
written, one inside a comment continues nothing, and a quoted value may span lines. The body
of a here-doc (`cat > notes.txt <<EOF` ... `EOF`) is text another program reads, not commands
of the script: its `MODEL=/old/model` line was read as an assignment and put into the config.
Each logical line comes without its comment; here-doc bodies are set aside (`bodies`), so the
caller can say when the verl command is in one (a job script fed to `sbatch <<EOF`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from trainer.shell_quoting import OPERATORS

_METACHARACTERS = " \t;&|()<>"  # after one of these, `#` starts a comment
_DELIMITER_END = " \t\n;&|()<>"  # what ends a here-doc's delimiter word


def logical_lines(text: str, bodies: list[str]) -> Iterator[tuple[int, str]]:
    """The commands of `text`, one logical line each with the number of the line it starts
    on (continuations joined, quoted newlines kept, comments removed); each here-doc body is
    appended to `bodies` instead. Linear in the text."""
    text = text.replace("\r\n", "\n")
    numbers = _LineNumbers(text)
    start = 0  # where the logical line being read starts
    out: list[str] = []
    quote = ""  # "'", '"', or "$'" (bash's ANSI-C quoting, where a backslash escapes)
    pending: list[tuple[str, bool]] = []  # here-docs opened on this line: delimiter, strip tabs
    index, size = 0, len(text)
    unclosed = 0  # before this index, a `((` found no `))` on its line: none looked for
    while index < size:
        char = text[index]
        if quote == "'":
            quote = "" if char == "'" else quote
        elif char == "\\" and index + 1 == size:  # bash drops a backslash ending the file
            break
        elif char == "\\":
            if text[index + 1] == "\n":  # a continuation: removed, in double quotes too
                index += 2
                continue
            out.append(text[index : index + 2])
            index += 2
            continue
        elif quote:
            quote = "" if char == quote[-1] else quote
        elif char == "\n":
            yield numbers.at(start), "".join(out)
            out = []
            index = start = _skip_bodies(text, index + 1, pending, bodies)
            pending = []
            continue
        elif char == "#" and (not out or out[-1][-1] in _METACHARACTERS):
            end = text.find("\n", index)
            index = size if end < 0 else end
            continue
        elif char in "'\"":
            quote = char
        elif text.startswith("$'", index):
            quote = "$'"
            out.append("$'")
            index += 2
            continue
        elif index >= unclosed and (text.startswith(("((", "$(("), index)):
            end = _arithmetic_end(text, index + (char == "$"))
            if end is not None:  # `$(( 1 << 10 ))` shifts: no here-doc
                out.append(text[index:end])
                index = end
                continue
            newline = text.find("\n", index)  # none looked for again on this line
            unclosed = size if newline < 0 else newline
        elif text.startswith("<<<", index):  # a here-string: one word, no body
            out.append("<<<")
            index += 3
            continue
        elif text.startswith("<<", index):
            end, delimiter, strip = _here_doc(text, index + 2)
            if delimiter:
                pending.append((delimiter, strip))
            out.append(text[index:end])
            index = end
            continue
        out.append(char)
        index += 1
    if out:
        yield numbers.at(start), "".join(out)


class _LineNumbers:
    """The number of the line an index of `text` is on, for indexes asked in rising order:
    each newline is counted once, so numbering a whole script stays linear."""

    def __init__(self, text: str):
        self.text = text
        self.counted = 0  # newlines before this index are in `number`
        self.number = 1

    def at(self, index: int) -> int:
        self.number += self.text.count("\n", self.counted, index)
        self.counted = index
        return self.number


def _arithmetic_end(text: str, start: int) -> int | None:
    """The index after the `))` closing the `((` at `start`, on the same line; None if none."""
    depth = 0
    for index in range(start, len(text)):
        char = text[index]
        if char == "\n":
            return None
        depth += (char == "(") - (char == ")")
        if depth == 0:
            return index + 1
    return None


def _here_doc(text: str, start: int) -> tuple[int, str, bool]:
    """After `<<` at `start - 2`: the index after its delimiter word, the delimiter with its
    quotes removed (`'EOF'`, `"EOF"`, `\\EOF` all end at a line `EOF`), and whether `<<-`
    strips leading tabs from the body's lines."""
    index = start
    strip = text.startswith("-", index)
    index += strip
    while index < len(text) and text[index] in " \t":
        index += 1
    word: list[str] = []
    quote = ""
    while index < len(text) and (quote or text[index] not in _DELIMITER_END):
        char = text[index]
        if quote:
            if char == quote:
                quote = ""
            else:
                word.append(char)
        elif char in "'\"":
            quote = char
        elif char == "\\" and index + 1 < len(text):
            index += 1
            word.append(text[index])
        else:
            word.append(char)
        index += 1
    return index, "".join(word), strip


def _skip_bodies(text: str, start: int, pending: list[tuple[str, bool]], bodies: list[str]) -> int:
    """Past the bodies of the here-docs `pending` (in order) that start at `start`; each body
    goes to `bodies`. One never closed runs to the end, as bash reads it."""
    index = start
    for delimiter, strip in pending:
        body: list[str] = []
        while index < len(text):
            end = text.find("\n", index)
            end = len(text) if end < 0 else end
            line = text[index:end]
            index = end + 1
            if (line.lstrip("\t") if strip else line) == delimiter:
                break
            body.append(line)
        bodies.append("\n".join(body))
    return min(index, len(text))


# the compound commands a line may open, by the word that closes each
_CLOSED_BY = {"if": "fi", "case": "esac", "for": "done", "select": "done", "while": "done"}
_CLOSED_BY |= {"until": "done", "{": "}"}
# after one of these words a command starts (a keyword may stand there)
_COMMAND_NEXT = frozenset({"then", "do", "else", "elif", "!", "if", "while", "until", "{", "("})
# the command after one of these (`&&`, `||`, `|`, `|&`, `&`) runs only if the one before fails
# or succeeds, or runs in a subshell of its own (a pipeline, `&`): what it sets is not set for
# the script
_GUARDS = OPERATORS
# a compound command after one of these, or before one, is an element of a pipeline: bash runs
# each in a subshell of its own (no `lastpipe`)
_PIPES = frozenset({"|", "|&"})


@dataclass
class Reading:
    """One command as `Blocks.read` found it."""

    guarded: bool  # any of it may not run (a block that may not run, after a guard)
    words: list[str]  # its words less the parentheses of the subshells it opens or closes
    # the scopes it opens (None) and closes (True: a subshell's, whose settings are not seen
    # after it; False: a block that runs in the script's shell), in order: each block is one
    scopes: list[bool | None] = field(default_factory=list)

    def opened_first(self) -> int:
        """How many scopes it opens before closing any: those its own words run in."""
        return next(
            (at for at, scope in enumerate(self.scopes) if scope is not None), len(self.scopes)
        )


class Blocks:
    """Which commands of a script stand inside a compound command (`if`/`case`/`for`/`while`/
    `until` bodies, function bodies, `( ... )` subshells) or after `&&`, `||`, `|` or `&`,
    read word by word over the commands (split at `;`, with those operators as words of
    their own: `trainer.shell_quoting.mark`). Nothing is evaluated, so what such a command
    sets runs only maybe: reading it as run gave a debug branch's model path, or an uncalled
    function's, as the one the verl command gets. What a subshell's commands set is seen by
    the commands after them inside it (a verl command in `( MODEL=/m/b; python3 ... )`
    gets /m/b), and not after it: each block is a scope (`Reading.scopes`) that the
    variables undo when it ends as a subshell. A `{ ...; }` group on its own always runs in
    the script's shell (what it sets stands), unless it is an element of a pipeline or run in
    the background (`{ ...; } | tee log`: a subshell, found at its `}`); one that is a
    function's body, or follows `&&`/`||`, is a block that may not run, and one after `|` or
    `&` a subshell."""

    def __init__(self) -> None:
        # the words that close the blocks open now, innermost last, each with whether what
        # runs inside it runs only maybe (all but a `{ ...; }` group and a `( ... )`
        # subshell) and whether it runs in a subshell
        self.open: list[tuple[str, bool, bool]] = []
        self.before = ""  # the last word read, over commands (`f()` then `{` on the next line)
        self.body_next = False  # after a function's name: its body, on this line or the next

    def inside(self) -> bool:
        """Whether a block that may not run is open."""
        return any(maybe for _closer, maybe, _subshell in self.open)

    def read(self, words: list[str]) -> Reading:
        """Read one command's shell words: whether any of it is inside a block that may not
        run, opens or closes one, or follows a guard (`&&`, `||`, `|`, `&`); its words less
        the subshells' parentheses; the scopes it opens and closes."""
        reading = Reading(self.inside(), [])
        command = True  # the next word is where a command (or keyword) starts
        name_next = False  # after `function`: the function's name
        for at, word in enumerate(words):
            if name_next:
                name_next, command, self.body_next, self.before = False, True, True, word
                reading.words.append(word)
                continue
            opened = len(word) - len(word.lstrip("(")) if command and word[:2] != "((" else 0
            self.open += [(")", False, True)] * opened
            reading.scopes += [None] * opened
            core = word[opened:]
            reading.guarded = reading.guarded or word in _GUARDS
            if command and core in _CLOSED_BY:
                piped = self.before in _PIPES  # an element of a pipeline: a subshell
                group = core == "{" and not self.body_next and self.before not in _GUARDS - _PIPES
                self.open.append((_CLOSED_BY[core], not group, piped))
                reading.scopes.append(None)
                reading.guarded = reading.guarded or not group
            elif command and self.open and core == self.open[-1][0] != ")":
                _closer, maybe, piped = self.open.pop()
                reading.scopes.append(piped or _runs_apart(words[at + 1 :]))
                reading.guarded = reading.guarded or maybe
            elif core == "function" and command:
                name_next = True
            closed, subshells = self._close_parentheses(core)
            reading.scopes += [True] * subshells
            kept = core[: len(core) - subshells]
            reading.words += [kept] if kept or not (opened or subshells) else []
            self.body_next = core.endswith("()") or (self.body_next and core in ("", "()"))
            command = (
                closed != core  # after a subshell's `)` or a case pattern's
                or core in _COMMAND_NEXT
                or word in _GUARDS
                or core.endswith("()")  # a function's name: its body follows
                or (command and (opened > 0 or core == ""))
            )
            self.before = word
        reading.guarded = reading.guarded or self.inside()
        return reading

    def _close_parentheses(self, core: str) -> tuple[str, int]:
        """`core` less the `)` that close a subshell or end a case pattern (`7b)`): the
        parentheses it does not open itself; and how many of them close a subshell."""
        subshells = 0
        while core.endswith(")") and core.count(")") > core.count("("):
            core = core[:-1]
            if self.open and self.open[-1][0] == ")":  # not a case pattern's
                self.open.pop()
                subshells += 1
        return core, subshells


def _runs_apart(rest: list[str]) -> bool:
    """Whether the compound command that the words `rest` follow runs in a subshell: an
    element of a pipeline (`} | tee log`, after its redirections) or run in the background."""
    operators = [word for word in rest if word in _GUARDS]
    return "&" in operators or (bool(operators[:1]) and operators[0] in _PIPES)
