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
# the command after one of these runs only as the one before fails or succeeds
_CONDITIONS = frozenset({"&&", "||"})
# a compound command after one of these, or before one, is an element of a pipeline: bash runs
# each in a subshell of its own (no `lastpipe`)
_PIPES = frozenset({"|", "|&"})


@dataclass
class Piece:
    """One command of a list or pipeline: the words between two OPERATORS (`Blocks.read`)."""

    inside: bool  # a block that may not run is open where it starts
    blocked: bool  # inside, or opens or closes, a block that may not run
    words: list[str] = field(default_factory=list)  # less its subshells' parentheses
    conditional: bool = False  # it runs only as the one before fails or succeeds
    function: str = ""  # the function whose body it stands in (the outermost), "" if none
    block: str = ""  # the word that closes the innermost block it stands in (`fi`, `done`)
    # the scopes it opens (None) and closes (True: a subshell's, whose settings are not seen
    # after it; False: a block that runs in the script's shell), in order: each block is one,
    # and so are a pipeline's elements and a list run in the background (`_subshells`)
    scopes: list[bool | None] = field(default_factory=list)

    def maybe(self) -> bool:
        """Whether what it sets may not be set where it stands."""
        return self.blocked or self.conditional

    def opened_first(self) -> int:
        """How many scopes it opens before closing any: those its own words run in."""
        return next(
            (at for at, scope in enumerate(self.scopes) if scope is not None), len(self.scopes)
        )


def _conditions(pieces: list[Piece], operators: list[str]) -> None:
    """Mark each of `pieces` (between `operators`, in order) that runs only as the one before
    fails or succeeds: the first pipeline of an and-or list always runs (`MODEL=/m/b &&
    python3 ...` sets MODEL), each after `&&` or `||` may not; after `&` a new list starts."""
    conditional = False
    for at, piece in enumerate(pieces):
        before = operators[at - 1] if at else ""
        conditional = before in _CONDITIONS or (before in _PIPES and conditional)
        piece.conditional = conditional


def _subshells(pieces: list[Piece], operators: list[str]) -> None:
    """Give each element of a pipeline of two or more, and each list that `&` runs in the
    background, a subshell's scope: what it sets is seen by its own later commands
    (`MODEL=/m/b && python3 ... &` passes /m/b) and not after it. The list after a `&` runs
    in the script's shell again (`cmd & MODEL=/m/b` sets MODEL). Each scope opens after the
    blocks its first piece opens first (`{ X=1 &`: the group holds the list); a block that
    such a scope closes is closed as a subshell too (`_runs_apart`), so which of them ends
    first does not change what is put back."""
    background = [False] * len(pieces)  # in a list ended by `&`
    for at in reversed(range(len(operators))):
        background[at] = operators[at] == "&" or background[at + 1]
    for at, piece in enumerate(pieces):
        before = operators[at - 1] if at else ""
        after = operators[at] if at < len(operators) else ""
        piped = int(before in _PIPES or after in _PIPES)
        starts = int(background[at] and before in ("", "&"))
        ends = int(after == "&")
        opened = piece.opened_first()
        piece.scopes[opened:opened] = [None] * (starts + piped)
        piece.scopes += [True] * (piped + ends)


class Blocks:
    """Which commands of a script stand inside a compound command (`if`/`case`/`for`/`while`/
    `until` bodies, function bodies, `( ... )` subshells), read word by word over the
    commands (split at `;`, with `&&`, `||`, `|`, `|&` and `&` as words of their own:
    `trainer.shell_quoting.mark`; which of a list's commands may not run for those, or run
    in a subshell, is `_conditions`'s and `_subshells`'s). Nothing is evaluated, so what a
    command in a block sets runs only maybe: reading it as run gave a debug branch's model
    path, or an uncalled function's, as the one the verl command gets. What a subshell's
    commands set is seen by the commands after them inside it (a verl command in
    `( MODEL=/m/b; python3 ... )` gets /m/b), and not after it: each block is a scope
    (`Piece.scopes`) that the variables undo when it ends as a subshell. A `{ ...; }` group
    on its own always runs in the script's shell (what it sets stands), unless it is an
    element of a pipeline or run in the background (`{ ...; } | tee log`: a subshell, found
    at its `}`); one that is a function's body, or follows `&&`/`||`, is a block that may
    not run, and one after `|` a subshell. After `&` a new list starts: a group there runs
    in the script's shell."""

    def __init__(self) -> None:
        # the words that close the blocks open now, innermost last, each with whether what
        # runs inside it runs only maybe (all but a `{ ...; }` group and a `( ... )`
        # subshell), whether it runs in a subshell, and the function it is the body of ("")
        self.open: list[tuple[str, bool, bool, str]] = []
        self.before = ""  # the last word read, over commands (`f()` then `{` on the next line)
        self.body_next = False  # after a function's name: its body, on this line or the next
        self.named = ""  # the last function name read: whose body `body_next` is

    def inside(self) -> bool:
        """Whether a block that may not run is open."""
        return any(maybe for _closer, maybe, _subshell, _function in self.open)

    def function(self) -> str:
        """The function whose body is open (the outermost): a verl command in it reads the
        variables where the function is called, not where it is defined."""
        return next((function for *_block, function in self.open if function), "")

    def _piece(self) -> Piece:
        """A piece that starts here, with the blocks open now."""
        block = self.open[-1][0] if self.open else ""
        return Piece(self.inside(), self.inside(), function=self.function(), block=block)

    def read(self, words: list[str]) -> list[Piece]:
        """Read one command's shell words: its pieces between OPERATORS, each with its words
        less the subshells' parentheses, whether it is inside a block that may not run or
        opens or closes one, or may not run for the operators around it, and the scopes it
        opens and closes."""
        pieces = [self._piece()]
        operators: list[str] = []
        command = True  # the next word is where a command (or keyword) starts
        name_next = False  # after `function`: the function's name
        for at, word in enumerate(words):
            if name_next:
                name_next, command, self.body_next, self.before = False, True, True, word
                self.named = word.removesuffix("()")
                pieces[-1].words.append(word)
                continue
            opened = len(word) - len(word.lstrip("(")) if command and word[:2] != "((" else 0
            self.open += [(")", False, True, "")] * opened
            pieces[-1].scopes += [None] * opened
            core = word[opened:]
            if command and core in _CLOSED_BY:
                piped = self.before in _PIPES  # an element of a pipeline: a subshell
                group = core == "{" and not self.body_next and self.before not in _CONDITIONS
                function = self.named if self.body_next else ""
                self.open.append((_CLOSED_BY[core], not group, piped, function))
                pieces[-1].function = pieces[-1].function or function
                pieces[-1].scopes.append(None)
                pieces[-1].blocked = pieces[-1].blocked or not group
            elif command and self.open and core == self.open[-1][0] != ")":
                _closer, maybe, piped, _function = self.open.pop()
                pieces[-1].scopes.append(piped or _runs_apart(words[at + 1 :]))
                pieces[-1].blocked = pieces[-1].blocked or maybe
            elif core == "function" and command:
                name_next = True
            closed, subshells = self._close_parentheses(core)
            pieces[-1].scopes += [True] * subshells
            kept = core[: len(core) - subshells]
            if kept in OPERATORS:  # the next piece starts after it
                operators.append(kept)
                pieces.append(self._piece())
            elif kept or not (opened or subshells):
                pieces[-1].words.append(kept)
            if core.endswith("()"):  # `f()`, or `f ()` after its name
                self.named = core.removesuffix("()") or self.before
            self.body_next = core.endswith("()") or (self.body_next and core in ("", "()"))
            command = (
                closed != core  # after a subshell's `)` or a case pattern's
                or core in _COMMAND_NEXT
                or word in OPERATORS
                or core.endswith("()")  # a function's name: its body follows
                or (command and (opened > 0 or core == ""))
            )
            self.before = word
        _conditions(pieces, operators)
        _subshells(pieces, operators)
        return pieces

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
    operators = [word for word in rest if word in OPERATORS]
    return "&" in operators or (bool(operators[:1]) and operators[0] in _PIPES)
