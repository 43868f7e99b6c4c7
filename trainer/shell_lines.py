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

import fnmatch
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from trainer import shell_quoting
from trainer.shell_quoting import (
    ARM_ENDS,
    OPERATORS,
    QUOTED_BRACE_CHARS,
    QUOTED_PATTERN_CHARS,
    QuoteLevels,
)

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
    levels = QuoteLevels()  # the quotes open, nested through `$(`, `${` and backquotes
    pending: list[tuple[str, bool]] = []  # here-docs opened on this line: delimiter, strip tabs
    index, size = 0, len(text)
    unclosed = 0  # before this index, a `((` found no `))` on its line: none looked for
    while index < size:
        char = text[index]
        if not levels.escapes():  # in single quotes
            levels.read(char)
        elif char == "\\" and index + 1 == size:  # bash drops a backslash ending the file
            break
        elif char == "\\":
            if text[index + 1] == "\n":  # a continuation: removed, in double quotes too
                index += 2
                continue
            out.append(text[index : index + 2])
            levels.escaped()
            index += 2
            continue
        elif levels.inside():
            levels.read(char)
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
            levels.start(char)
        elif text.startswith("${", index):  # one word to its `}`: a `#` in it is text
            levels.start_braces()
            out.append("${")
            index += 2
            continue
        elif text.startswith("$'", index):
            levels.start("$'")
            out.append("$'")
            index += 2
            continue
        elif index >= unclosed and (text.startswith(("((", "$((", "$["), index)):
            closing = _arithmetic_end(text, index + (char == "$"))
            if closing is not None:  # `$(( 1 << 10 ))` shifts: no here-doc
                out.append(text[index:closing])
                index = closing
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
    """The index after the `))` closing the `((` at `start` (or the `]` closing a `[`: bash's
    `$[ ... ]`), on the same line; None if none."""
    opener, closer = ("[", "]") if text[start] == "[" else ("(", ")")
    depth = 0
    for index in range(start, len(text)):
        char = text[index]
        if char == "\n":
            return None
        depth += (char == opener) - (char == closer)
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
# the compound commands that are a test or sum of their own, closed by a word wherever it
# stands (not only where a command starts): read as a block where one is a function's body
# (`f() [[ -n $1 ]]`, `f() (( N > 2 ))`); elsewhere they are commands as any other
_ENDS_ANYWHERE = {"[[": "]]", "((": "))"}
# a word that opens no subshell where a command starts: a sum, or a function's `()` (`function
# f () { ...; }`)
_NO_SUBSHELL = ("((", "()")
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
    skipped: bool = False  # in a case arm that never runs (`Blocks`): bash does not run it

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
    in the script's shell. The one choice made here is a `case`'s: where its word's value
    (`word_value`) and an arm's patterns are known, the arm bash runs is read as run and
    the others as never run (`Piece.skipped`); all its arms were read as may-not-run, and a
    value the script picks by a known backend was flagged. Where a function's or a loop's
    body starts and ends is marked (`marks`), for the caller to read it again where bash
    runs it again."""

    def __init__(self, word_value: Callable[[str], str | None] = lambda word: None) -> None:
        self.word_value = word_value  # a word's value where it stands; None if not known
        self.open: list[_Block] = []  # the blocks open now, innermost last
        # beside each open block, the summary of those outside it: `open` changes only through
        # `_push`, `_pop` and `_replace`, which keep both
        self._outside: list[_Summary] = []
        self.before = ""  # the last word read, over commands (`f()` then `{` on the next line)
        self.body_next = False  # after a function's name: its body, on this line or the next
        self.named = ""  # the last function name read: whose body `body_next` is
        # in the command read last, where a function's body ("function", its name, the index
        # of the word it starts at) or a loop's ("loop", "", index) starts, and where either
        # ends ("end", the function's name or "", the index of the word that ends it)
        self.marks: list[tuple[str, str, int]] = []

    def inside(self) -> bool:
        """Whether a block that may not run is open."""
        return self._summary().maybe

    def skipped(self) -> bool:
        """Whether a case arm that never runs is open (`_Case`)."""
        return self._summary().skipped

    def function(self) -> str:
        """The function whose body is open (the outermost): a verl command in it reads the
        variables where the function is called, not where it is defined."""
        return self._summary().function

    def _summary(self) -> _Summary:
        """What the open blocks say of a command inside them all: the summary of those
        outside the innermost one, and the innermost as it stands now (the one block that
        changes while open: a case's arm decided). Reading every open block for every
        command made a script of thousands of nested blocks take minutes."""
        if not self.open:
            return _Summary()
        return self._outside[-1].then(self.open[-1])

    def _push(self, block: _Block) -> None:
        self._outside.append(self._summary())
        self.open.append(block)

    def _pop(self) -> _Block:
        self._outside.pop()
        return self.open.pop()

    def _replace(self, index: int, block: _Block) -> None:
        """Put `block` in place of the open block at `index` (from the end); the summaries
        of those inside it are taken again (a few: the subshells its word opens)."""
        self.open[index] = block
        for at in range(len(self.open) + index + 1, len(self.open)):
            self._outside[at] = self._outside[at - 1].then(self.open[at - 1])

    def _piece(self) -> Piece:
        """A piece that starts here, with the blocks open now."""
        block = self.open[-1].closer if self.open else ""
        inside = self.inside()
        return Piece(inside, inside, function=self.function(), block=block, skipped=self.skipped())

    def read(self, words: list[str]) -> list[Piece]:
        """Read one command's shell words: its pieces between OPERATORS, each with its words
        less the subshells' parentheses, whether it is inside a block that may not run or
        opens or closes one, or may not run for the operators around it, and the scopes it
        opens and closes."""
        pieces = [self._piece()]
        operators: list[str] = []
        self.marks = []
        command = True  # the next word is where a command (or keyword) starts
        name_next = False  # after `function`: the function's name
        for at, word in enumerate(words):
            if name_next:
                name_next, command, self.body_next, self.before = False, True, True, word
                self.named = word.removesuffix("()")
                pieces[-1].words.append(word)
                continue
            if self.open and word == self.open[-1].closer in _ENDS_ANYWHERE.values():
                self._close(self._pop(), words, at, pieces[-1])
                pieces[-1].words.append(word)
                command, self.before = False, word
                continue
            case = self.open[-1].case if self.open else None
            if word in _ARM_ENDS or (case is not None and case.reads_header(word)):
                if case is not None:
                    self._read_case_word(case, word, pieces[-1])
                command, self.before = case is None or case.stage in ("arm", "patterns"), word
                continue
            opened = (
                len(word) - len(word.lstrip("(")) if command and word[:2] not in _NO_SUBSHELL else 0
            )
            body = self.body_next and command  # a function's body opens with this word
            for _ in range(opened):
                self._push(_Block(")", False, True))
            pieces[-1].scopes += [None] * opened
            core = word[opened:]
            if body and opened:  # `f() ( ... )`: the body is a subshell, run where it is called
                self._replace(-opened, self._body(")", True, at, pieces[-1]))
            elif body and word[:2] in _ENDS_ANYWHERE:  # `f() [[ ... ]]`, `f() (( ... ))`
                self._open_test(word, at, pieces[-1])
            elif command and core in _CLOSED_BY:
                self._open(core, at, pieces[-1])
            elif command and self.open and core == self.open[-1].closer != ")":
                self._close(self._pop(), words, at, pieces[-1])
            elif command and core == "do" and self.open and self.open[-1].closer == "done":
                self.open[-1].loop = not self.skipped()
                self.marks += [("loop", "", at + 1)] * self.open[-1].loop
            elif core == "function" and command:
                name_next = True
            closed, subshells = self._close_parentheses(core, at, pieces[-1])
            pieces[-1].scopes += [True] * subshells
            kept = shell_quoting.sliced(word, opened, len(word) - subshells)
            if kept in OPERATORS:  # the next piece starts after it
                operators.append(kept)
                pieces.append(self._piece())
            elif (kept or not (opened or subshells)) and not (command and core == "case"):
                pieces[-1].words.append(kept)  # a case's header is no command's words
            if core.endswith("()"):  # `f()`, or `f ()` after its name
                self.named = core.removesuffix("()") or self.before
            waits = self.body_next and not body and core in ("", "()")  # `f` `()`, or a newline
            self.body_next = core.endswith("()") or waits
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

    def _open(self, core: str, at: int, piece: Piece) -> None:
        """A compound command opens with the word `core` (the `at`th of its command)."""
        case = _Case() if core == "case" else None
        if self.body_next:
            self._push(self._body(_CLOSED_BY[core], core != "{", at, piece))
            self.open[-1].case = case
            piece.scopes.append(None)
            return
        piped = self.before in _PIPES  # an element of a pipeline: a subshell
        group = core == "{" and self.before not in _CONDITIONS
        self._push(_Block(_CLOSED_BY[core], not group, piped, case=case))
        piece.scopes.append(None)
        piece.blocked = piece.blocked or not group

    def _body(self, closer: str, whole: bool, at: int, piece: Piece) -> _Block:
        """The block of a function's body that opens at the `at`th word of the command
        (`piece`'s), closed by `closer`: any compound command bash takes as a body, marked
        where it starts (`marks`) to be read again where the function is called. A `{ ...; }`
        group's body is its commands; any other's (`f() ( ... )`, `f() if ...; fi`, `f() for
        ...; done`) is the whole compound command (`whole`), as bash runs it at the call: a
        subshell's settings undone after it, a loop run as a loop. Read as its inner
        commands, a subshell's body was never read at the call (its verl command got the
        variables as they stood at the definition, at exit 0), and a loop's lost its end."""
        function = self.named
        body = not self.skipped()
        self.marks += [("function", function, at + (not whole))] * body
        self.body_next = False
        piece.function = piece.function or function
        piece.blocked = True
        return _Block(closer, True, closer == ")", function, body, whole=whole)

    def _open_test(self, word: str, at: int, piece: Piece) -> None:
        """A function's body that is a `[[ ... ]]` test or `(( ... ))` sum, opening with
        `word` (the `at`th of the command): a block to the word that closes it, or the one
        word (`((N > 2))`) where it closes there."""
        opener = word[:2]
        block = self._body(_ENDS_ANYWHERE[opener], True, at, piece)
        piece.scopes.append(None)
        if opener == "((" and len(word) > 2 and word.endswith("))"):
            self._close(block, [], at, piece)
        else:
            self._push(block)

    def _close(self, block: _Block, words: list[str], at: int, piece: Piece) -> None:
        """`block` closes at the `at`th of the command's `words` (a word that ends it where
        it runs as a subshell, `} | tee log`, after it), with the marks of the loop and the
        function body it ends."""
        piece.scopes.append(block.piped or _runs_apart(words[at + 1 :]))
        piece.blocked = piece.blocked or block.maybe
        self._end_marks(block, at)

    def _end_marks(self, block: _Block, at: int) -> None:
        """Where the loop body and the function body of `block`, closed by the `at`th word,
        end: the loop's before its `done`, a whole function body after its last word."""
        if block.loop:
            self.marks.append(("end", "", at))
        if block.body:
            self.marks.append(("end", block.function, at + block.whole))

    def _read_case_word(self, case: _Case, word: str, piece: Piece) -> None:
        """Take a word of the innermost `case`'s header, of an arm's patterns, or the mark
        that ends an arm (`trainer.shell_quoting.ARM_ENDS`): once an arm's patterns are
        read, whether it runs is known or not (`_Case.decide`), and the piece they start
        stands in that arm."""
        if word in _ARM_ENDS:
            case.end_arm(word)
        elif case.stage == "word":
            case.value, case.stage = self.word_value(word), "in"
        elif case.stage == "in":
            case.stage = "patterns"
            case.value = case.value if word == "in" else None
        elif word != "|":
            pattern, closes, rest = word.removeprefix("(" * (not case.patterns)).partition(")")
            # `""` is a word of its own (`shell_quoting.mark`): the pattern of an empty value
            case.patterns += [pattern] if pattern or word == "" else []
            if closes:
                self.open[-1].maybe = case.decide() is not True
                piece.inside = piece.blocked = self.inside()
                piece.skipped = self.skipped()
                piece.words += [rest] if rest else []

    def _close_parentheses(self, core: str, at: int, piece: Piece) -> tuple[str, int]:
        """`core` (the `at`th word of `piece`'s command) less the `)` that close a subshell
        or end a case pattern (`7b)`): the parentheses it does not open itself; and how many
        of them close a subshell (a function's body among them: `piece` blocked, and its
        end marked after this word)."""
        subshells = 0
        while core.endswith(")") and core.count(")") > core.count("("):
            core = core[:-1]
            if self.open and self.open[-1].closer == ")":  # not a case pattern's
                block = self._pop()
                subshells += 1
                piece.blocked = piece.blocked or block.maybe
                self._end_marks(block, at)
        return core, subshells


# whether a case arm runs, or its patterns are tested: True, False, or None where it is known
# only when the script runs
Runs = bool | None
_ARM_ENDS = {mark: end for end, mark in ARM_ENDS.items()}
# a pattern holding any of these is not read here (a variable, a command, a bracket class,
# extglob, an escape): whether it matches is known only when the script runs
_UNREAD_PATTERN = re.compile(r"[$`\\\[(\ue000-\uf8ff]")
# a pattern character quoted or escaped (`"v*"`, `\?`) matches itself: a class of one
_AS_IT_IS = {
    ord(mark): f"[{char}]"
    for char, mark in (*QUOTED_PATTERN_CHARS.items(), *QUOTED_BRACE_CHARS.items())
}
_UNMARKED = dict.fromkeys(_AS_IT_IS)  # those marks taken out, to see what else a pattern holds


def _both(left: Runs, right: Runs) -> Runs:
    if left is False or right is False:
        return False
    return True if left and right else None


def _either(left: Runs, right: Runs) -> Runs:
    if left or right:
        return True
    return False if left is False and right is False else None


@dataclass
class _Case:
    """A `case WORD in` block as read: its header, then each arm's patterns and whether the
    arm runs, as bash picks it: the first arm whose pattern (a glob: `*`, `?`) matches the
    word's value runs, `;&` runs the next arm's commands too and `;;&` tests the next arm's
    patterns; where the value or a pattern is not known, whether an arm runs is not either."""

    value: str | None = None  # the word's value; None where known only when the script runs
    stage: str = "word"  # what is read next: "word", "in", "patterns", or the "arm"'s commands
    patterns: list[str] = field(default_factory=list)  # the arm's patterns read so far
    testing: Runs = True  # whether bash tests this arm's patterns (no arm before has run)
    falls: Runs = False  # whether the arm before runs and falls through to this one (`;&`)
    matches: Runs = False  # whether this arm's patterns are tested and one matches
    runs: Runs = False  # whether this arm runs

    def reads_header(self, word: str) -> bool:
        """Whether `word` is of the case's header or an arm's patterns, not a command's."""
        return self.stage != "arm" and not (self.stage == "patterns" and word == "esac")

    def never_runs(self) -> bool:
        return self.stage == "arm" and self.runs is False

    def decide(self) -> Runs:
        """Whether the arm whose patterns are read now runs."""
        self.matches = _both(self.testing, _matches(self.value, self.patterns))
        self.runs = _either(self.falls, self.matches)
        self.stage, self.patterns = "arm", []
        return self.runs

    def end_arm(self, mark: str) -> None:
        """The arm ends with `;;`, `;&` or `;;&` (`_ARM_ENDS`'s `mark`): the next arm's
        patterns are tested if none ran yet (or after `;;&`), and its commands run after
        `;&` where this arm's did."""
        end = _ARM_ENDS[mark]
        self.falls = self.runs if end == ";&" else False
        if end == ";;&":
            self.testing = _either(self.testing, self.runs)
        else:
            self.testing = _both(self.testing, None if self.matches is None else not self.matches)
        self.stage = "patterns"


def _matches(value: str | None, patterns: list[str]) -> Runs:
    """Whether the case word's `value` matches one of an arm's `patterns`, as bash's globs."""
    known = [
        pattern.translate(_AS_IT_IS)
        for pattern in patterns
        if not _UNREAD_PATTERN.search(pattern.translate(_UNMARKED))
    ]
    if value is not None and any(fnmatch.fnmatchcase(value, pattern) for pattern in known):
        return True
    return False if value is not None and len(known) == len(patterns) else None


@dataclass
class _Block:
    """A compound command open where the script is read (`Blocks.open`)."""

    closer: str  # the word that closes it
    maybe: bool  # what runs inside it runs only maybe (all but a `{ ...; }` group, a subshell)
    piped: bool  # it runs in a subshell
    function: str = ""  # the function it is the body of, "" if none
    body: bool = False  # where its body starts and ends is marked (`Blocks.marks`)
    case: _Case | None = None  # a `case`'s arms
    loop: bool = False  # where its loop body (`do` ... `done`) starts and ends is marked
    whole: bool = False  # the function's body is the whole block, its first and last words too


@dataclass(frozen=True)
class _Summary:
    """What a run of open blocks says of a command inside them all."""

    maybe: bool = False  # one of them may not run
    skipped: bool = False  # one is a case arm that never runs
    function: str = ""  # the outermost function body among them, "" if none

    def then(self, block: _Block) -> _Summary:
        """This summary with `block` open inside them."""
        case = block.case
        return _Summary(
            self.maybe or block.maybe,
            self.skipped or (case is not None and case.never_runs()),
            self.function or block.function,
        )


def _runs_apart(rest: list[str]) -> bool:
    """Whether the compound command that the words `rest` follow runs in a subshell: an
    element of a pipeline (`} | tee log`, after its redirections) or run in the background."""
    operators = [word for word in rest if word in OPERATORS]
    return "&" in operators or (bool(operators[:1]) and operators[0] in _PIPES)
