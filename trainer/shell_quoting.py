"""bash's quoting forms that Python's shlex does not know, marked in a logical line before
shlex splits it into words, for `mfsdp config from-verl`.

shlex reads `$'a\\nb'` as `$` and the single-quoted `a\\nb`: the value arrived as the text
`$a\\nb` (and `NAME=$'x\\nmodel:\\n  path: /etc'` became a YAML mapping), where bash makes it
"a", a newline, "b". `$"text"` (bash's translated string: the text itself, absent a
translation) arrived as `$text`, a reference to another variable; `\\$V` (unquoted or in
double quotes, a literal `$V` to bash) was substituted as if unescaped. Here `$"..."` is
read as "..." and an escaped or single-quoted `$` as a literal one (`LITERAL_DOLLAR`, which
`literal` turns back into `$` once values are made); so is a backquote (`LITERAL_BACKQUOTE`:
`'a`b`'` is text bash passes on, no command substitution). `$'...'` is marked `ANSI_C`, its text
held after the mark in characters no script writes (`ansi_c_decoded` reads it back): a value
that holds one is refused, naming the variable, but IFS, which decides how bash splits
unquoted expansions into words, is read from it (`IFS=$'\\n\\t'`, the usual strict mode:
not read, a `$ARGS` holding overrides was dropped).

A line holds commands apart from its quotes: shlex knows no `;`, so `A=1; B=/models/x` gave A
the value `1;`, and `cd /x&&MODEL=/m` was one word that set nothing; `MODEL=/m/Qwen; echo hi`
put `/m/Qwen;` into model.path. Each unquoted, unescaped `;` (`;;`, `;&` and `;;&` ending a
case arm too) outside `$(...)`, `((...))`, an array's `(...)`, backquotes and `${...}` is
marked `COMMAND_END`, a word of its own that `commands` splits at (in a `( ... )` subshell
too: its commands are the script's, run apart); what ends a case arm is then a command of
its own (`ARM_ENDS`), as which arm runs turns on it; `&&`, `||`, `|`, `|&` and `&` (not `>&`, `&>`
redirections) become words of their own, so the guarded reading (`shell_lines.Blocks`) sees
them however they are spaced. A blank in an unquoted `${...}` is escaped: it is text of the
one word bash reads there, and text quoted inside it is held between `QUOTED_REGION` marks,
which bash never splits. A quoted or escaped `{`, `,` or `}` is marked
(`QUOTED_BRACE_CHARS`), so those left plain are bash's brace expansion (`shell_braces`). An
unquoted tilde prefix (`D=~/ckpt`, `${X:-~/ckpt}`) becomes the `${HOME}` bash expands it to.
"""

from __future__ import annotations

import re

LITERAL_DOLLAR = "\ue001"  # a `$` bash passes as it is (single-quoted or escaped)
ANSI_C = "\ue002"  # where a `$'...'` string stood
# a backquote bash passes as it is (single-quoted or escaped): no command substitution
LITERAL_BACKQUOTE = "\ue012"
COMMAND_END = "\ue003"  # a `;` ending a command: a word of its own
# what ends a case arm (`;;`, `;&` falling through to the next arm's commands, `;;&` testing
# the next arm's patterns): a command of its own, so that `shell_lines.Blocks` knows which
# arm runs where `;` alone would end a command inside the arm
ARM_ENDS = {";;": "\ue004", ";&": "\ue005", ";;&": "\ue006"}
# a pattern character bash takes as it is, quoted or escaped (`"v*")`, `\?)` in a case arm):
# shlex drops the quotes, and the `*` was matched as a glob; `literal` turns each back
QUOTED_PATTERN_CHARS = {"*": "\ue007", "?": "\ue008", "[": "\ue009", "(": "\ue00a", ")": "\ue00b"}
# a brace-expansion character bash takes as it is, quoted or escaped (`"{a,b}"`, `\\{a,b}`):
# marked, so that a `{`, `,` or `}` left plain in a word is one bash may expand
# (`shell_braces`); `literal` turns each back, and a value stored in a variable holds none
# (`stored`): what a variable gives is never brace-expanded
QUOTED_BRACE_CHARS = {"{": "\ue00d", "}": "\ue00e", ",": "\ue00f"}
# around text quoted inside the word of an unquoted `${NAME:-"a b"}`: bash does not split
# what it gives (read as split, `${N:-"run 1"}` was refused as two words); `literal` and
# `stored` drop them
QUOTED_REGION = ("\ue010", "\ue011")
_UNQUOTED = {
    mark: char for char, mark in (*QUOTED_PATTERN_CHARS.items(), *QUOTED_BRACE_CHARS.items())
}
_RESTORED: dict[int, str | None] = {ord(mark): char for mark, char in _UNQUOTED.items()}
_RESTORED.update(dict.fromkeys(map(ord, QUOTED_REGION)))
_STORED: dict[int, str | None] = {ord(QUOTED_BRACE_CHARS[char]): char for char in "{},"}
_STORED.update(dict.fromkeys(map(ord, QUOTED_REGION)))
# before the `$` of an expansion bash reads unquoted (`k=$M`, not `"k=$M"`): its value is split
# into words at blanks (`Word`); a quoted one is one word, as the quotes are gone after shlex
UNQUOTED_EXPANSION = "\ue00c"
_EXPANSION_START = re.compile(r"\$[A-Za-z_0-9{@*]")
# the text of a `$'...'` string, held after its ANSI_C mark: each character moved into a
# private-use plane no script writes, so shlex keeps it in the word (a newline in it ended it)
_HELD_FIRST = 0xF0000
_UNHELD_OFFSET = 0xFFFF  # a character from here on is beyond the plane: held as _UNHELD
_UNHELD = chr(_HELD_FIRST + _UNHELD_OFFSET)
_HELD_TEXT = re.compile("[\U000f0000-\U000fffff]")
_HELD_RUN = re.compile(ANSI_C + "([\U000f0000-\U000fffff]*)")
# bash's escapes in `$'...'`: one character, octal, hex, Unicode, a control character
_ANSI_C_ESCAPE = re.compile(
    r"\\(?:([abeEfnrtv\\'\"?])|([0-7]{1,3})|x([0-9A-Fa-f]{1,2})|u([0-9A-Fa-f]{1,4})"
    r"|U([0-9A-Fa-f]{1,8})|c(.))",
    re.DOTALL,
)
_ANSI_C_CHARS = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}
_MARKS = (
    LITERAL_DOLLAR
    + LITERAL_BACKQUOTE
    + ANSI_C
    + COMMAND_END
    + UNQUOTED_EXPANSION
    + "".join(ARM_ENDS.values())
    + "".join(_UNQUOTED)
    + "".join(QUOTED_REGION)
)
# the operators between the commands of a list or pipeline (`mark` sets them apart as words)
OPERATORS = frozenset({"&&", "||", "|", "|&", "&"})
_CONTROL = re.compile(r";;?&?|&&|\|\||\|&|[|&]")  # `;` forms, lists and pipes, longest first


def mark(line: str) -> str:
    """`line` with single-quoted and escaped dollars marked literal, `$"..."` as "...", each
    `$'...'` replaced by ANSI_C, each `;` ending a command by a COMMAND_END word, and `&&`,
    `||`, `|`, `&` set apart as words; any of the marks already in it are dropped. Quotes are
    read as bash nests them (`QuoteLevels`): the `"` inside `"$(cmd "arg")-x"` opens a quote
    of its own, and the `)` after it ends the `$(`."""
    line = _HELD_TEXT.sub("", line.translate({ord(char): None for char in _MARKS}))
    out: list[str] = []
    nesting = _Nesting()
    levels = QuoteLevels()
    index, size = 0, len(line)
    word_start = 0  # where the word being read starts, for a tilde prefix (`_tilde_at`)
    region = False  # the quote open was opened in an unquoted `${...}` (`QUOTED_REGION`)
    while index < size:
        char = line[index]
        if _ends_a_name(line, index):
            _brace_name(out)
        if char == "\\" and index + 1 < size and levels.escapes():
            plain = nesting.outside() and levels.plain()
            out.append(_escaped(line[index + 1], levels.innermost(), plain))
            levels.escaped()
            index += 2
            continue
        elif levels.quotes_afresh() and line.startswith("$'", index):
            end = _ansi_c_end(line, index + 2)
            out.append(ANSI_C + _held_ansi_c(line[index + 2 : end].removesuffix("'")))
            index = end
            levels.escaped()
            continue
        elif levels.quotes_afresh() and line.startswith('$"', index):
            index += 1  # the translated string is the text itself: read as "..."
            levels.escaped()
            continue
        elif levels.inside():
            hidden = levels.hides(char)
            quote = levels.read(char)
            special = char == "*" and out[-1:] == ["$"]  # `"$*"`: no pattern character
            if region and not levels.inside():
                out.append(QUOTED_REGION[1])
                region = False
            out.append("" if hidden else char if special else _in_quotes(char, quote))
        elif nesting.outside() and (control := _control(line, index)):
            out.append(f" {_control_mark(control)} ")
            index += len(control)
            word_start = index
            continue
        elif nesting.outside() and (apart := _set_apart(line, index)):
            out.append(apart[0])
            index += apart[1]
            continue
        elif char == "~" and _tilde_at(line, index, word_start, nesting):
            out.append(_HOME)
        else:
            if nesting.outside() and _EXPANSION_START.match(line, index):
                out.append(UNQUOTED_EXPANSION)
            subshell = _opens_subshell(line, index, out, nesting.after_pattern)
            if subshell and nesting.after_pattern and out[-1:] == [")"]:
                out.append(" ")  # `go)(A=1; ...)`: the pattern's word ends at its `)`
            nesting.read(char, out[-1] if out else "", subshell)
            levels.start(char)
            out.append("\\" + char if char in " \t" and nesting.in_braces_only() else char)
            region = levels.inside() and nesting.in_braces_only()
            out += [QUOTED_REGION[0]] if region else []
            word_start = index + 1 if char in " \t" and nesting.outside() else word_start
        index += 1
    return "".join(out)


# bash's tilde prefix `~` (`~/x`, `~` alone) as the reference to HOME it expands to: a path
# key takes HOME from this environment where the script does not set it, and names it
# (`Variables.from_environment`); `~user` and `~+` stay as written
_HOME = "${HOME}"
# where a tilde prefix may start in a word: its start, after the `=` of an assignment (also
# an argument written as one, `export D=~/x`; not `a.b=~/x`, whose name is none), and
# after each `:` in an assignment's value (`PATH=~/a:~/b`)
_TILDE_AFTER = re.compile(r"(?:[A-Za-z_][A-Za-z0-9_]*\+?=(?:\(|.*:)?)?", re.DOTALL)
# in the word of an unquoted `${NAME:-~/x}` (`-`, `=`, `+`, `?`, with or without `:`)
_TILDE_IN_BRACES = re.compile(r"\$\{[A-Za-z_0-9]+:?[-=+?]$")
_TILDE_ENDS = " \t/;&|)"  # what may follow a tilde prefix that names no user


def _tilde_at(line: str, index: int, word_start: int, nesting: _Nesting) -> bool:
    """Whether the unquoted `~` at `index` (in the word from `word_start`) is a tilde
    prefix bash expands to HOME: read as text, `D=~/ckpt` was refused as a `~` Hydra
    refuses, where verl receives the home's path."""
    after = line[index + 1 : index + 2]
    if nesting.in_braces_only():
        found = _TILDE_IN_BRACES.search(line, max(0, index - 200), index)
        return found is not None and (not after or after in "/}")
    if not nesting.outside():
        return False
    prefix = line[word_start:index]
    if not _TILDE_AFTER.fullmatch(prefix):
        return False
    return not after or after in _TILDE_ENDS or (after == ":" and "=" in prefix)


def _ends_a_name(line: str, index: int) -> bool:
    """Whether a quote or escape at `index` stands between text and a character a variable's
    name goes on with (`"$M"x`, `$M"_b"`, `$M\\x`): without its quotes, `$M` read on into
    `$Mx`, another variable."""
    after = index + 1 + line.startswith(("$'", '$"'), index)
    if line[index] not in "'\"\\$" or (after == index + 1 and line[index] == "$"):
        return False
    return after < len(line) and (line[after].isalnum() or line[after] == "_")


def _brace_name(out: list[str]) -> None:
    """`out` (the marked text so far) with a `$NAME` that ends it, past empty quotes, made
    `${NAME}`, so that the text after it, unquoted by shlex, is no part of the name."""
    end = len(out)
    while end and out[end - 1] in ("'", '"'):
        end -= 1
    start = end
    while (
        start and len(out[start - 1]) == 1 and (out[start - 1].isalnum() or out[start - 1] == "_")
    ):
        start -= 1
    named = start < end and not out[start].isdigit()
    if named and start and out[start - 1] == "$":
        out[start - 1] = "${"
        out.insert(end, "}")


def _in_quotes(char: str, quote: str) -> str:
    """What stands for `char` read inside quotes (`quote`: the quote that makes it literal,
    `QuoteLevels.read`): a single-quoted `$` or backquote marked literal, a quoted pattern
    character marked as it is, anything else as written."""
    if quote == "'" and char in "$`":
        return LITERAL_DOLLAR if char == "$" else LITERAL_BACKQUOTE
    return _as_it_is(char) if quote else char


def _as_it_is(char: str) -> str:
    """A quoted character: a pattern or brace-expansion character marked as one bash
    takes as it is."""
    return QUOTED_PATTERN_CHARS.get(char) or QUOTED_BRACE_CHARS.get(char, char)


def _escaped(char: str, quote: str, plain: bool) -> str:
    """What stands for `\\char` (`plain`: outside `$(...)`, `${...}` and backquotes): a
    literal `$` (or backquote, outside them), a pattern character marked as it is (in
    double quotes bash keeps the backslash too), or the escape as written, for shlex."""
    if char == "$":
        return LITERAL_DOLLAR
    if char == "`" and plain:
        return LITERAL_BACKQUOTE
    if (char in QUOTED_PATTERN_CHARS or char in QUOTED_BRACE_CHARS) and plain:
        return "\\" * (quote == '"') + _as_it_is(char)
    return "\\" + char


def _set_apart(line: str, index: int) -> tuple[str, int] | None:
    """What at `index` is set apart from the word it is glued to, so that shlex splits it
    as bash reads it, and how many characters of `line` it stands for: `()` before a
    function's `{` (`f(){` is the function `f()` and its body's `{`), a function's `( )`
    written with blanks inside (`f ( ) ( ... )`, read as `f ()`: split, its `(` opened a
    subshell and the function was never defined), and an empty quoted word before a case
    pattern's `)` (`"")`: shlex made it `)`, and the arm testing for an empty value lost
    its pattern); None for none."""
    if line.startswith("(){", index):
        return "() ", 2
    spaced = _SPACED_PARENTHESES.match(line, index)
    if spaced is not None and _AFTER_A_NAME.search(line[max(0, index - 1) : index] or " "):
        return "() ", spaced.end() - index
    empty = line[index : index + 2]
    starts_word = index == 0 or line[index - 1] in " \t(|"
    if empty in ("''", '""') and line.startswith(")", index + 2) and starts_word:
        return f"{empty} ", 2
    return None


# `( )` with blanks inside, after a blank or a name's character: a function's `()` (bash
# takes no empty subshell); not an empty array `A=( )`, `$( )`, `<( )` or extglob's `@( )`
_SPACED_PARENTHESES = re.compile(r"\([ \t]+\)")
_AFTER_A_NAME = re.compile(r"[ \t\w.:-]")


def commands(words: list[str]) -> list[list[str]]:
    """The words of a marked line (`mark`), one list per command: split at each COMMAND_END,
    none empty."""
    split: list[list[str]] = [[]]
    for word in words:
        if word == COMMAND_END:
            split.append([])
        else:
            split[-1].append(word)
    return [command for command in split if command]


def simple_commands(words: list[str]) -> list[list[str]]:
    """The words of one command (`commands`) split at its OPERATORS: each command of the
    list or pipeline, none empty. A verl command's arguments end at the first: the words
    of `... && python3 -m verl.trainer.main_generation model.path=/m/other` after it are
    another program's, and were read as the launch's own."""
    split: list[list[str]] = [[]]
    for word in words:
        if word in OPERATORS:
            split.append([])
        else:
            split[-1].append(word)
    return [command for command in split if command]


def _control_mark(control: str) -> str:
    """The words that stand for the control operator `control` in a marked line."""
    if control in ARM_ENDS:
        return f"{COMMAND_END} {ARM_ENDS[control]} {COMMAND_END}"
    return COMMAND_END if control == ";" else control


def _control(line: str, index: int) -> str:
    """The `;`, `;;`, `&&`, `||`, `|`, `&`, ... at `index` that separates commands; "" where
    there is none, or the `&` or `|` is part of a redirection (`2>&1`, `&>log`, `>|`)."""
    match = _CONTROL.match(line, index)
    if match is None:
        return ""
    redirection = line[index - 1 : index] in ("<", ">") or line.startswith(">", index + 1)
    if match.group(0) in ("&", "|") and redirection:
        return ""
    return match.group(0)


class _Nesting:
    """Whether the text read so far is inside `$(...)` or `(...)` (a subshell, arithmetic),
    backquotes or `${...}`, where a `;` or `|` belongs to the command or word around it."""

    def __init__(self) -> None:
        self.parentheses = 0
        self.subshells: list[bool] = []  # for each `(` open, whether it opens a subshell
        self.braces = 0
        self.commands_in_braces = 0  # `$(` open inside `${...}` (`${A:-$(cat f)}`)
        self.backquoted = False
        # the last character read, less blanks, is a case pattern's `)`, after which a
        # command starts (`go) ( A=1; B=2 ) ;;`): one that closes no `(` on the line, or
        # closes one that stands where a command or pattern starts (`(go)`), as a subshell's
        # `)` followed by `(` is no command bash takes
        self.after_pattern = False

    def outside(self) -> bool:
        return not (self.parentheses or self.braces or self.backquoted)

    def in_braces_only(self) -> bool:
        """Whether the text read so far is the word of an unquoted `${...}` (`${1:?need lr}`,
        `${1:-a b}`), outside any `$(...)` or backquotes in it: a blank there is text of
        the one word bash reads, so it is escaped for shlex, which split the word at it (the
        assignment became a prefix of a command `lr}`)."""
        inside = self.parentheses or self.commands_in_braces or self.backquoted
        return bool(self.braces) and not inside

    def read(self, char: str, before: str, subshell: bool = False) -> None:
        """Take one unquoted character (`before`: the text just ahead of it; `subshell`: a
        `(` that opens a subshell, whose commands a `;` separates as anywhere: `(MODEL=/m/b;
        python3 ...)` was read as one command, which set nothing). A case
        pattern's `)` closes nothing: the count stays at 0. Inside `${...}` a parenthesis is
        text of the word (`${A:-(x}`): counted, it left the rest of the line inside a
        subshell, and no later `;` on it ended a command (`; MODEL=/m/b` set MODEL to
        `/m/b;`)."""
        if char not in " \t":
            closes = not self.subshells or self.subshells[-1]
            self.after_pattern = char == ")" and closes and not self.braces
        if char in "()" and self.braces:  # each `(` inside a `$(` counts: `$(( $((a)) * 3 ))`
            if char == "(" and (before == "$" or self.commands_in_braces):
                self.commands_in_braces += 1
            elif char == ")" and self.commands_in_braces:
                self.commands_in_braces -= 1
            return
        if char == "(":
            self.subshells.append(subshell)
            self.parentheses += not subshell
        elif char == ")":
            nested = not self.subshells.pop() if self.subshells else True
            self.parentheses = max(0, self.parentheses - nested)
        elif char == "`":
            self.backquoted = not self.backquoted
        elif char == "{" and before == "$":
            self.braces += 1
        elif char == "}" and self.braces:
            self.braces -= 1


class QuoteLevels:
    """The quotes and substitutions open in a quoted word, innermost last, as bash reads
    them: inside `$(...)`, `${...}` and backquotes quoting starts afresh, so the `"` of
    `"$(basename "$M")-run"` opens a quote inside the `$(`, not closing the outer one. Read
    as one level, that `"` ended the word's quotes, the `)` was taken as quoted text, the
    `$(` never closed and the line (its assignment with it) was lost. A quote opens where
    no level is (`start`); each character after it, up to the quote that closes it, is
    `read`; escapes are the caller's (`escapes`, `escaped`)."""

    def __init__(self) -> None:
        self.open: list[str] = []  # "'", "$'", '"', "(" (`$(` or `(` in it), "{", "`", "["
        self.after_dollar = False  # the character read last was an unescaped `$`

    def inside(self) -> bool:
        return bool(self.open)

    def plain(self) -> bool:
        """Whether no substitution is open inside the word's quotes."""
        return len(self.open) <= 1

    def innermost(self) -> str:
        return self.open[-1] if self.open else ""

    def quotes_afresh(self) -> bool:
        """Whether `$'...'` and `$"..."` quote here as they do outside any quotes: outside
        the word's quotes, and in a `${...}` inside its double quotes (bash's default
        `extquote`). Read as text there, `"${N:-$'a'}"` gave `$'a'` where bash gives `a`,
        and `"${N:-$"a"}"` the value of a variable `a`."""
        if not self.open:
            return True
        substitution = "(" in self.open or "`" in self.open
        return self.open[-1] == "{" and self.open[0] == '"' and not substitution

    def escapes(self) -> bool:
        """Whether a backslash escapes the character after it here (not in single quotes)."""
        return self.innermost() != "'"

    def escaped(self) -> None:
        """An escaped character was taken (by the caller): no `$` stands before the next."""
        self.after_dollar = False

    def start(self, text: str) -> None:
        """Take unquoted text outside any level: a quote (`'`, `"`, `$'`) opens the first."""
        self.open = [text] if text in _QUOTES else []
        self.after_dollar = False

    def start_braces(self) -> None:
        """Take an unquoted `${`, outside any level: its word runs to the `}` that closes it,
        quotes in it nesting as in double quotes' `${...}` (`${1:-a #b}`: a `#` in it starts
        no comment; read as one, the line lost its `#b}` and the rest of the command)."""
        self.open = ["{"]
        self.after_dollar = False

    def read(self, char: str) -> str:
        """Take the next character (not an escaped one): the quote that makes it literal
        where it stands ("'" or '"'), or "" where it opens or closes a level or is the
        unquoted text of a substitution (the `*` of `"$(ls *)"` is a glob there)."""
        top = self.open[-1]
        after_dollar, self.after_dollar = self.after_dollar, char == "$"
        if char == _CLOSES[top]:
            self.open.pop()
            return ""
        if top in ("'", "$'"):
            return "'"
        opened = self._opens(char, top, after_dollar)
        if opened:
            self.open.append(opened)
            return ""
        return '"' if top == '"' else ""

    def _opens(self, char: str, top: str, after_dollar: bool) -> str:
        """The level `char` opens inside the level `top`, "" if none: in double quotes only
        `$(`, `${`, `$[` (arithmetic, whose `[` and `*` are no pattern characters: marked as
        quoted, `"$[ N * 2 ]"` was kept as text) and a backquote do; in a substitution's
        text any quote does (a `'` in `"${A:-'x'}"` is text, as bash keeps it), a `(` (text
        in `${...}` unless `$(`), and in arithmetic a `[` (`$[ A[1] + 1 ]`)."""
        if top == '"':
            return char if (after_dollar and char in "({[") or char == "`" else ""
        if char == "[":
            return char if top == "[" or after_dollar else ""
        if char == "'":
            if top == "{" and self.open[-2:-1] == ['"']:
                return ""
            return "$'" if after_dollar else "'"
        if char in '"`':
            return char
        if char == "(":
            return char if top != "{" or after_dollar else ""
        return char if char == "{" and after_dollar else ""

    def hides(self, char: str) -> bool:
        """Whether `char`, read next, opens or closes a quote inside `${...}` inside the
        word's double quotes: shlex, knowing no `${`, ends the word's quotes there and
        `"${N:-"a b"}"` became two words (the assignment a prefix of a command `b}`); the
        outer quotes already quote its text. Inside `$(...)` or backquotes the text is kept
        whole as written."""
        if char != '"' or self.open[0] != '"' or "(" in self.open or "`" in self.open:
            return False
        top = self.open[-1]
        return top == "{" or (top == '"' and self.open[-2:-1] == ["{"])


# what closes each level of `QuoteLevels`, and the quotes that open a word's first
_QUOTES = ("'", '"', "$'")
_CLOSES = {"'": "'", "$'": "'", '"': '"', "(": ")", "{": "}", "`": "`", "[": "]"}


# the words after which a command starts (`then read -r X`, `if (cd /x)`)
KEYWORDS_BEFORE_COMMAND = frozenset(
    {"then", "do", "else", "elif", "if", "while", "until", "!", "{", "time"}
)
_KEYWORD_PIECES = 9  # marked pieces enough to hold any of them and more: a longer word is none


def _opens_subshell(line: str, index: int, out: list[str], after_pattern: bool) -> bool:
    """Whether the unquoted `(` at `index` opens a subshell: it stands where a command
    starts (the line's start, after `;`, `&`, `|`, `(`, such a keyword, or a case pattern's
    `)`: `after_pattern`) or is a function's body (after its `()`, or after `function NAME`)
    and is not `((` arithmetic; not `$(`, `=(` (an array), `<(` or a function's `()`. Taken
    as nested parentheses, the `;` in a body written on one line (`train() ( python3 ...;
    echo done )`) ended no command: verl got `echo` and `done` as overrides. Only the blanks
    and the two words before it are read, so marking a line stays linear."""
    if line[index] != "(" or line.startswith("((", index):
        return False
    end = _before_blanks(out, len(out))
    text = "".join(out[max(0, end - _KEYWORD_PIECES) : end]).rstrip(" \t")
    if after_pattern or not text or text[-1] in "(;&|" + COMMAND_END or text.endswith("()"):
        return True
    last = text.rsplit(None, 1)[-1]
    # after `in` a case pattern opens (`case $1 in (go) ...`): read as a subshell's `(`, its
    # `)` ends the pattern (`after_pattern`), as after `;;` (a COMMAND_END)
    pattern = last == "in"
    return last in KEYWORDS_BEFORE_COMMAND or pattern or _after_function_name(out, end)


def _before_blanks(out: list[str], end: int) -> int:
    """Where the blanks (and empty pieces) that end `out[:end]` start."""
    while end and not out[end - 1].strip(" \t"):
        end -= 1
    return end


def _after_function_name(out: list[str], end: int) -> bool:
    """Whether `out[:end]` ends with `function NAME` (`function train ( ... )`: its body)."""
    start = end
    while start and out[start - 1][-1:] not in _WORD_ENDS:
        start -= 1
    before = _before_blanks(out, start)
    if start == end or before == start:
        return False
    text = "".join(out[max(0, before - _KEYWORD_PIECES) : before])
    return _WORD_END.split(text)[-1] == "function"


# what ends the word before a `(` (`_after_function_name`); an empty piece is none
_WORD_ENDS = tuple(" \t;&|()<>" + COMMAND_END)
_WORD_END = re.compile(f"[{re.escape(''.join(_WORD_ENDS))}]")


class Word(str):
    """A word holding expansions bash reads unquoted (`k=$M`): `unquoted` holds the index of
    each one's `$`. bash splits what such an expansion gives at blanks into words of their
    own (`M="/m/a b"` passes `k=/m/a` and `b` to verl); read as one word, the config got the
    path `/m/a b`, and `$ARGS` holding `a=1 b=2` gave no override at all."""

    unquoted: tuple[int, ...] = ()
    # the whole word is what an unquoted expansion gave (an element of `${A[@]}`, an
    # argument `$@` passes), split as it stands
    expanded: bool = False


def expanded_word(text: str) -> Word:
    """`text` as given by an unquoted expansion: a `Word` split whole (`Word.expanded`)."""
    word = Word(text)
    word.expanded = True
    return word


def unmarked_word(text: str) -> str:
    """A word shlex split from a marked line (`mark`), less its UNQUOTED_EXPANSION marks: a
    `Word` that knows where they stood where it held any, else the text itself."""
    if UNQUOTED_EXPANSION not in text:
        return text
    pieces = text.split(UNQUOTED_EXPANSION)
    word = Word("".join(pieces))
    word.unquoted = tuple(len("".join(pieces[: at + 1])) for at in range(len(pieces) - 1))
    return word


def sliced(word: str, start: int, end: int) -> str:
    """`word[start:end]`, a `Word` still knowing its unquoted expansions (`Blocks` takes a
    subshell's parentheses off the words of a command)."""
    if not isinstance(word, Word):
        return word[start:end]
    kept = Word(word[start:end])
    kept.unquoted = tuple(at - start for at in word.unquoted if start <= at < end)
    return kept


def glued(word: str, text: str) -> str:
    """`word` with the plain `text` after it, a `Word` still knowing its unquoted
    expansions."""
    if not isinstance(word, Word):
        return word + text
    joined = Word(word + text)
    joined.unquoted = word.unquoted
    return joined


def literal(text: str) -> str:
    """A value with its literal dollars and quoted pattern characters restored (`mark`)."""
    return text.replace(LITERAL_DOLLAR, "$").replace(LITERAL_BACKQUOTE, "`").translate(_RESTORED)


def stored(text: str) -> str:
    """`text` as a variable holds it once assigned: its quoted brace characters as they are
    and no quoted regions (`QUOTED_REGION`), as bash splits and brace-expands nothing of a
    value by how it was quoted where it was set; its literal dollars stay marked."""
    return text.translate(_STORED)


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


def _held_ansi_c(text: str) -> str:
    """The text of a `$'...'` string held in the private-use plane (`_HELD_FIRST`), a
    character beyond what the plane holds as `_UNHELD` (the value is then not read)."""
    return "".join(
        chr(_HELD_FIRST + ord(char)) if ord(char) < _UNHELD_OFFSET else _UNHELD for char in text
    )


def ansi_c_decoded(value: str) -> str | None:
    """`value` with each `$'...'` string in it (its ANSI_C mark and held text) as bash
    decodes it; None where one held a character `_held_ansi_c` could not hold."""
    if _UNHELD in value:
        return None
    return _HELD_RUN.sub(
        lambda match: _ansi_c_text("".join(chr(ord(char) - _HELD_FIRST) for char in match[1])),
        value,
    )


def whole_ansi_c(word: str) -> str:
    """A word of a command written as one `$'...'` string (`$'k=v'`), as bash passes it:
    decoded, its `$` and backquotes literal; any other word as it is. Left marked, the
    word held no `=` and verl's override was dropped without a word."""
    decoded = ansi_c_decoded(word) if _HELD_RUN.fullmatch(word) else None
    if decoded is None:
        return word
    return decoded.replace("$", LITERAL_DOLLAR).replace("`", LITERAL_BACKQUOTE)


def _ansi_c_text(text: str) -> str:
    """The text bash makes of a `$'...'` string's `text`: its escapes decoded, cut at a
    NUL (bash ends the string there); an escape bash does not know is kept as written."""
    decoded = _ANSI_C_ESCAPE.sub(_ansi_c_char, text)
    return decoded.split("\0", 1)[0]


def _ansi_c_char(match: re.Match) -> str:
    """The character one escape of `_ANSI_C_ESCAPE` stands for."""
    simple, octal, hexadecimal, short, long, control = match.groups()
    if simple is not None:
        return _ANSI_C_CHARS[simple]
    if control is not None:
        return chr(ord(control.upper()) & 0x1F) if control != "?" else "\x7f"
    number = int(octal, 8) & 0xFF if octal else int(hexadecimal or short or long, 16)
    return chr(number) if number <= 0x10FFFF else match.group(0)
