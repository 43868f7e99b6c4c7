"""A launch script's shell variables as bash sets and expands them, for `mfsdp config
from-verl`: nothing is run, and what bash would take from elsewhere stays as written.

Set: `NAME=value` (several on one line too, and `NAME+=more`), `export`, `readonly`,
`declare`/`typeset`/`local` (with an option that changes the value, `-i` arithmetic, `-l`/
`-u` case, `-n` a reference, the variable is one known only as the script runs: references
to it stay as written, and are named), bash arrays `NAME=( ... )` (`declare -a NAME=(` is
the reader's), an element `NAME[1]=x` and a plain `NAME=x` of an array (its element 0),
`unset NAME` (a readonly one kept, one local to a calling function revealing the value it
hid; `unset 'NAME[0]'` one element), the positional parameters `set -- a b` sets, and the
assignment in `${NAME:=default}`; a variable set to what only the running script knows
(a `for`/`select` loop's name, `read`, `mapfile`, `printf -v`, `getopts`, `let`, an
arithmetic `(( N++ ))` or `$(( N = 8 ))`) is left as written, and named with what set it
(`shell_command_targets.unknowable_targets`).
Expanded: `$NAME`, `${NAME}` (of an array, its element 0), `${NAME:-default}` and
`${NAME-default}` (with the colon an empty value takes the default too), `${NAME:+other}`,
`${NAME:?message}`, and integer `$(( ... ))`; an array's words as a whole word
(`"${A[@]}"`, `"${A[@]:1:2}"`, `${A[1]}`), those of one not read here listed
(`Variables.lost`). Read only as `NAME=value` lines and `:-` as set-or-not, a script's
`EMPTY=` then `${EMPTY:-/models/x}` gave an empty model path, `declare -r MODEL=/new` left
the previous `MODEL`, and `unset` and `+=` changed nothing. A variable the script does not set
stays as written (a path may take it from this environment, `from_environment`); a note says where a
default stands in for an argument of the script (`${1:-vllm}`). All copies of values
together are bounded (`ExpansionTooLarge`).
What a subshell sets is put back when it ends (`Variables.enter`, `Variables.leave`); after
`source`, `.` or `eval`, which run text not read here, or an `export`/`declare`/`printf -v`
whose variable's name is known only as it runs (`export $(cat .env)`), a variable the verl
command uses that no assignment after it sets is named with that line
(`Variables.opaque_origins`).
Which variables a command's words set, unset, make readonly or leave to the running script,
whether a command may set any variable, and the syntax of names, assignments and references
(`REFERENCE`, `ASSIGNMENT`) are `trainer.shell_command_targets`'s: they are read from the
words alone, with none of the state kept here, so the script's reader asks them too.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, TypeVar

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.errors import MfsdpUsageError
from trainer import shell_arithmetic, shell_quoting
from trainer.shell_command_targets import (
    ASSIGNMENT,
    ELEMENT,
    NAME,
    PLAIN_OPTIONS,
    REFERENCE,
    WRAPPERS,
    made_readonly,
    names_set,
    names_used,
    opaque_command,
    reference_name,
    set_arguments,
    set_commands,
    unknowable_targets,
    unset_elements,
    unset_names,
)

# verl's newer examples group their overrides in bash arrays: `DATA=(` ... `)` then
# `"${DATA[@]}"` in the command (read as no keys at all, the config came out `{}` at exit 0)
ARRAY_START = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?)=\((.*)$", re.DOTALL)
# an array's words as a whole word: all (`${NAME[@]}`, `${NAME[*]}`), a slice
# `${NAME[@]:offset:length}`, or one element `${NAME[index]}` (group 4); read as no array at
# all, a slice's words went without a word
ARRAY_SPREAD = re.compile(
    r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\[(?:[@*]\](?::([^:}]*)(?::([^:}]*))?)?|([^]@*][^]]*)\])\}$"
)
_ELEMENT_SET = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\[([^]]*)\](\+?)=(.*)$", re.DOTALL)
ORIGINS_KEPT = 4  # the blocks named for a variable set in blocks (`Variables.maybe`)
# the words that pass on all positional parameters (`"$@"`)
FORWARDED = frozenset({"$@", "$*", "${@}", "${*}"})
# all the positional parameters (or their count) read within a word (`"x=$*"`, `${@:2}`)
_PARAMETERS_IN_WORD = re.compile(r"\$[@*#]|\$\{[#!]?[@*]")
_ABSENT = object()  # what a table held for a key it did not hold (`_Trail`)
_Key = TypeVar("_Key")
_Value = TypeVar("_Value")


# what closes each opener `_split_at_ifs` keeps whole: `$(`/`(`, `${`, `$[`/`[`
_CLOSER = {"(": ")", "{": "}", "[": "]"}


def _nests(char: str, closers: list[str]) -> bool:
    """Whether `char` opens a pair inside the substitution open (`closers`): a `(` in any,
    a `[` in arithmetic's `$[` (`$[ A[1] + 1 ]`)."""
    return bool(closers) and (char == "(" or (char == "[" and closers[-1] == "]"))


def _split_at_ifs(value: str, ifs: str) -> list[str]:
    """The fields bash splits `value` into at IFS's characters (`ifs`), outside the command
    substitutions, `$((...))` and references (`${1:?need a model}`) it holds as written:
    their text is no word of bash's, what they give is, known only as it runs. As bash
    does: a run of IFS's blanks (space, tab, newline) is one break and none at either end;
    each other IFS character is a break of its own, so `a,,b` under `IFS=,` gives an empty
    field between `a` and `b` (one after the last break is none); no fields for "", and the
    value whole under an empty IFS."""
    white = "".join(char for char in " \t\n" if char in ifs)
    value = value.strip(white)
    if not value or not ifs:
        return [value] if value else []
    others = "".join(char for char in ifs if char not in white)
    blanks = f"[{re.escape(white)}]*" if white else ""
    breaks = [f"{blanks}[{re.escape(others)}]{blanks}"] if others else []
    breaks += [f"[{re.escape(white)}]+"] if white else []
    parts: list[str] = []
    start = index = 0
    closers: list[str] = []  # the `)` or `}` each substitution open here waits for
    backquoted = False
    at_break = re.compile("|".join(breaks))
    # the characters any branch below acts on: the others are skipped in one search
    acted_on = re.compile(f"[{re.escape(shell_quoting.QUOTED_REGION[0] + '`$()[]{}' + ifs)}]")
    while index < len(value):
        found = acted_on.search(value, index)
        if found is None:
            break
        index = found.start()
        char = value[index]
        if char == shell_quoting.QUOTED_REGION[0] and not closers:  # quoted: never split
            end = value.find(shell_quoting.QUOTED_REGION[1], index)
            index = len(value) if end < 0 else end
        elif char == "`":
            backquoted = not backquoted
        elif value.startswith(("$(", "${", "$["), index) or _nests(char, closers):
            closers.append(_CLOSER[value[index + (char == "$")]])
            index += char == "$"
        elif closers and char == closers[-1]:
            closers.pop()
        elif not closers and not backquoted and (run := at_break.match(value, index)):
            parts.append(value[start:index])
            start = index = run.end()
            continue
        index += 1
    return [*parts, value[start:]] if start < len(value) else parts


class ExpansionTooLarge(MfsdpUsageError, ValueError):
    """The script's variables copy more text than a launch script holds; names the variable."""


def array_end(word: str) -> int | None:
    """Where in `word` (an element of a bash array, as `trainer.verl_script_lines` splits
    it) the bare `)` that ends the array stands, None where it holds none: a `)` closing a
    `$(...)`, `$((...))` or `(` of its own, one in a `${...}` or backquotes, or a quoted
    one (marked, `shell_quoting.QUOTED_PATTERN_CHARS`) ends nothing, as bash reads them.
    Read as the first word ending in `)`, `data.train_batch_size=$((GPUS * 8))` ended the
    array there, and its later elements were lost."""
    closers: list[str] = []  # the `)` or `}` each construct open here waits for
    backquoted = False
    index = 0
    while index < len(word):
        char = word[index]
        if char == "`":
            backquoted = not backquoted
        elif backquoted:
            pass
        elif word.startswith(("$(", "${"), index):
            closers.append(")" if word[index + 1] == "(" else "}")
            index += 1
        elif char == "(" and closers[-1:] != ["}"]:
            closers.append(")")
        elif closers and char == closers[-1]:
            closers.pop()
        elif char == ")" and not closers:
            return index
        index += 1
    return None


@dataclass
class Array:
    """A bash array assignment `NAME=(` (or `NAME+=(`) read word by word up to its `)`."""

    name: str
    append: bool
    items: list[str] = field(default_factory=list)

    def read(self, words: list[str]) -> list[str] | None:
        """Take one line's words; None while the array goes on, else the words after its
        closing `)` (`A=(x) B=(y)`, `A=(x` ... `y) && python3 ...`), which bash reads as
        what follows the assignment: taken as elements, or dropped, they were lost."""
        for at, word in enumerate(words):
            end = array_end(word)
            if end is not None:
                element = shell_quoting.sliced(word, 0, end)
                self.items += [element] if element else []
                return words[at + 1 :]
            self.items.append(word)
        return None


def _kept(origins: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """`origins` without repeats, the first `ORIGINS_KEPT` + 1 only: enough to name where
    to look (one more says there are more), and a script setting a variable in thousands
    of blocks costs no more."""
    return list(dict.fromkeys(origins))[: ORIGINS_KEPT + 1]


class _Trail:
    """The entries the variables' tables change while a block is open (`Variables.enter`),
    each with what it held before, and the variables its commands set, with their lines: a
    block that ends as a subshell (`( ... )`, `{ ...; } | tee log`) puts the entries back,
    as bash forgets what the subshell set. Only changes are kept, so reading a script stays
    linear in it where a copy of the tables at each block cost their size at each."""

    def __init__(self) -> None:
        self.changes: list[tuple[dict[Any, Any], Any, Any]] = []
        self.sets: list[tuple[str, int]] = []  # variables set inside open blocks, and where
        self.starts: list[tuple[int, int]] = []  # each open block's first change and set

    def open(self) -> None:
        self.starts.append((len(self.changes), len(self.sets)))

    def record(self, table: dict[Any, Any], key: Any) -> None:
        if self.starts:
            self.changes.append((table, key, table.get(key, _ABSENT)))

    def close(self, undo: bool) -> list[tuple[str, int]]:
        """End the innermost block (`undo`: its changes put back); the variables set in it."""
        changes, sets = self.starts.pop()
        set_inside = self.sets[sets:]
        if undo:
            for table, key, before in reversed(self.changes[changes:]):
                if before is _ABSENT:
                    dict.pop(table, key, None)
                else:
                    dict.__setitem__(table, key, before)
            del self.changes[changes:]
        if not self.starts:  # nothing left to put back
            self.changes.clear()
            self.sets.clear()
        return set_inside


class _Scoped(dict[_Key, _Value]):
    """A table of the variables whose changes are kept on the trail (`_Trail`)."""

    def __init__(self, trail: _Trail):
        super().__init__()
        self.trail = trail

    def __setitem__(self, key: _Key, value: _Value) -> None:
        self.trail.record(self, key)
        super().__setitem__(key, value)

    def discard(self, key: _Key) -> None:
        if key in self:
            self.trail.record(self, key)
            super().pop(key)


# the builtins that make a variable local to the function they run in (not with `-g`)
_LOCAL = frozenset({"local", "declare", "typeset"})


@dataclass
class _Call:
    """A function's call, or a loop's next pass, being read again (`Variables.enter_call`)."""

    arguments: int | None  # `Variables.arguments` where it stands, put back when it ends
    arguments_lost: str | None  # and `Variables.arguments_lost`
    function: bool  # a function's call: its `local` variables are its own
    # its local variables, each with what `Variables._local_tables` held for it before
    locals: dict[str, list[Any]] = field(default_factory=dict)
    # those of its locals that are assignments before its name (`X=b train`): bash holds
    # them in a scope around the call, so an `unset` in the body reveals the value outside
    temporary: set[str] = field(default_factory=set)


class Variables:
    """The script's variables, set line by line (`read_line`) and expanded into words
    (`substitute`); at most `max_chars` are copied in all."""

    def __init__(self, max_chars: int):
        self.max_chars = max_chars
        self.trail = _Trail()
        self.values: _Scoped[str, str] = _Scoped(self.trail)
        self.arrays: _Scoped[str, list[str]] = _Scoped(self.trail)
        # the arrays with an element unset before their last: bash keeps the other indexes,
        # a list here does not, so a later element's index is not known (`_unset_element`)
        self.sparse: _Scoped[str, bool] = _Scoped(self.trail)
        self.notes: list[str] = []  # defaults used for the script's arguments
        # the words of the verl command not read here, each said with why: an array's whose
        # elements are known only when the script runs (`spread`); the reader lists them
        # among the keys still to add, for exit 1
        self.lost: list[str] = []
        self.copied = 0
        self.read_ahead = 0  # copied by `fields` only to see how a word splits
        # the variables whose value may differ where the script runs: each set (or derived
        # from one set) in a block that may not run (`trainer.shell_lines.Blocks`), with
        # where: the variable set there and the line
        self.maybe: _Scoped[str, list[tuple[str, int]]] = _Scoped(self.trail)
        # the elements of each array set in a block that may not run, by the variable set
        # there and the line (an origin of `maybe`): what that block passes where it runs
        self.block_elements: dict[tuple[str, int], list[str]] = {}
        # the variables set to values known only when the script runs (`unknowable_targets`),
        # with what set them and where: references to them stay as written
        self.unknown: _Scoped[str, str] = _Scoped(self.trail)
        # the commands read so far that may set any variable (`opaque_command`), numbered
        # from 1, each shown with its line; and for each variable set where it surely runs,
        # how many of them stood before it: one set after the last is the script's
        self.opaque: _Scoped[int, str] = _Scoped(self.trail)
        self.set_after: _Scoped[str, int] = _Scoped(self.trail)
        # for each open scope, the variables set in it by `assign_in_branch`, each with its
        # line and what the tables `_branch_tables` held for it before: put back at its end
        self.branch_sets: list[list[tuple[str, int, list[Any]]]] = []
        # how many positional parameters (`$1`, `${2:-x}`) the function call being read
        # passes (`enter_call`); None for the script's own, known only when it runs
        self.arguments: int | None = None
        # why the positional parameters the script set (`set -- "${A[@]}" $X`) are not
        # known here; None where they are, or are the script's own: a `"$@"` passing them
        # lost the script's overrides (`lost`), where the script's own are the user's
        self.arguments_lost: str | None = None
        self.calls: list[_Call] = []  # the calls being read again (`enter_call`), innermost last
        # the variables known unset where they stand (`unset NAME`, or made local without a
        # value: `local NAME`): empty, and unset to `${NAME-default}`, whatever they held
        # before or this environment holds
        self.known_unset: _Scoped[str, bool] = _Scoped(self.trail)
        # the readonly variables (`readonly`, `declare -r`, `local -r`): True where the
        # command that made one surely runs, False in a block that may not run. bash refuses
        # to unset one, and stops the script at an assignment to one
        self.readonly: _Scoped[str, bool] = _Scoped(self.trail)
        # the function whose body is read where it is defined ("" elsewhere; set by the
        # reader), and for each function the blocks-set origins (`set_maybe`) its definition
        # made; `ran`: those made by commands read where they run, or may
        self.defining = ""
        self.defined: dict[str, set[tuple[str, int]]] = {}
        self.ran: set[tuple[str, int]] = set()

    def enter(self) -> None:
        """A block opens (`trainer.shell_lines.Reading.scopes`): what its commands set is
        kept on the trail until it ends (`leave`)."""
        self.trail.open()
        self.branch_sets.append([])

    def leave(self, subshell: bool) -> None:
        """The innermost block ends. A subshell's settings are not seen after it: each
        variable it set is put back as it was, and named wherever the verl command uses it
        (`set_maybe`), as one set in a block; so is each a branch set (`end_branch`)."""
        if not subshell:  # a subshell puts back all it set
            self.end_branch()
        self.branch_sets.pop()
        set_inside = self.trail.close(undo=subshell)
        if subshell:
            for name, line in set_inside:
                self.set_maybe(name, line)

    def enter_call(self, arguments: list[str] | None) -> None:
        """A function's body, or a loop's next pass (`arguments` None), is read again where
        bash runs it (`trainer.verl_script_reader`); what it sets stands, or is put back, at
        `leave_call`. A function call's `arguments` (as written, expanded here) are its
        positional parameters (`$1`, `${2:-x}`, those it does not pass unset), up to one
        whose words are known only as it runs (`"$@"`, a variable's value holding a blank,
        which bash may split); they are the call's own, as its `local` variables are
        (`make_local`)."""
        self.enter()
        self.calls.append(
            _Call(self.arguments, self.arguments_lost, function=arguments is not None)
        )
        if arguments is None:
            return
        positional = {name for table in self._local_tables() for name in table if name.isdigit()}
        for name in sorted(positional):
            self.make_local(name)
        self._set_positional(arguments)

    def _set_positional(self, arguments: list[str]) -> None:
        """The positional parameters made `arguments` (as written, expanded here as bash
        expands them: `"${A[@]}"` one parameter an element, `"$@"` those set before, an
        unquoted `$X` split at IFS): a function call's, or those `set -- ...` sets; in a
        call, local to it. Not known where a word's are known only as it runs
        (`arguments_lost` says why, unless they are the script's own)."""
        words = self._parameters(arguments)
        count = len(words) if isinstance(words, list) else 0
        for number in range(1, max(count, len(arguments)) + 1):
            self.make_local(str(number))
        self._forget_positional()
        if not isinstance(words, list):
            self.arguments, self.arguments_lost = None, words
            return
        for number, (value, written) in enumerate(words, start=1):
            self._set_origins(str(number), written)
            self.values[str(number)] = shell_quoting.stored(value)
        self.arguments, self.arguments_lost = count, None

    def _parameters(self, arguments: list[str]) -> list[tuple[str, str]] | str | None:
        """The words bash makes of `arguments` (as written), each with the word written;
        else why they are known only as the script runs, or None where they are the
        script's own arguments alone (`set -- "$@"` outside a call)."""
        words: list[tuple[str, str]] = []
        for written in arguments:
            if written in FORWARDED:
                passed = self.forwarded(written, self.notes)
                if passed is None and self.arguments_lost is None and len(arguments) > 1:
                    return f"the script's own arguments ({written}) with other words"
                if passed is None:
                    return self.arguments_lost
                words += passed
                continue
            if _PARAMETERS_IN_WORD.search(written):
                return f"{written}: the parameters within a word, not read here"
            lost = len(self.lost)
            spread = self.spread([written], self.notes)
            if len(self.lost) > lost:
                why = self.lost[lost]
                del self.lost[lost:]
                return why
            for word in spread:
                fields = self.fields(word)
                splits = getattr(word, "unquoted", ()) or getattr(word, "expanded", False)
                if fields is None and splits and self.ifs() is None:
                    return f"{written}: split at an IFS known only when the script runs"
                words += [(field, written) for field in fields or [self.substitute(word)]]
        return words

    def forwarded(self, written: str, notes: list[str]) -> list[tuple[str, str]] | None:
        """The words `written` (`"$@"`, `$*`, ...) passes of the positional parameters
        known here (a call's, or those `set --` set), each with the parameter it came from
        (`${1}`); a quoted `"$*"`, one word of them all, with `written`. None where they
        are not known here (`positional`)."""
        positional = self.positional()
        if positional is None:
            return None
        if "*" in written and 0 not in getattr(written, "unquoted", ()):
            values = [value for value, _reference in positional]
            return [(word, written) for word in self.as_words(written, values, notes)]
        return [
            (word, reference)
            for value, reference in positional
            for word in self.as_words(written, [value], notes)
        ]

    def _forget_positional(self) -> None:
        """The positional parameters set are no longer known (`$1` stays as written)."""
        for name in [name for name in {**self.values, **self.maybe} if name.isdigit()]:
            self._forget(name)

    def leave_call(self, stands: bool | None) -> None:
        """The body read again by `enter_call` ends. `stands` True (a call bash runs where
        it stands): what it set stands, less its local variables and positional parameters,
        put back as they were; None (a call that may not run): all it set is put back, and
        named wherever the verl command uses it (`set_maybe`); False (a loop's next pass,
        read only to compare its values): all it set is put back, unnamed."""
        call = self.calls.pop()
        if stands:
            for name, before in call.locals.items():
                self._put_back(name, before)
        self.branch_sets.pop()
        set_inside = self.trail.close(undo=not stands)
        if stands is None:
            for name, line in set_inside:
                self.set_maybe(name, line)
        self.arguments, self.arguments_lost = call.arguments, call.arguments_lost

    def in_function(self) -> bool:
        """Whether a function's call is being read (`enter_call`)."""
        return any(call.function for call in self.calls)

    def make_temporary(self, name: str) -> None:
        """`name` is assigned before the name of the function call being read (`X=b
        train`): local to the call (`make_local`), in a scope of its own around it."""
        self.make_local(name)
        self._temporary().add(name)

    def make_local(self, name: str) -> None:
        """`name` is local to the innermost function call being read (`local NAME`, an
        assignment before the call's name, a positional parameter): put back as it was
        when the call ends (`leave_call`)."""
        call = next((call for call in reversed(self.calls) if call.function), None)
        if call is not None and name not in call.locals:
            call.locals[name] = [table.get(name, _ABSENT) for table in self._local_tables()]

    def _local_tables(self) -> list[_Scoped[str, Any]]:
        """The tables that hold what a variable is (`make_local`)."""
        return [
            self.values,
            self.arrays,
            self.maybe,
            self.unknown,
            self.set_after,
            self.known_unset,
            self.readonly,
        ]

    def positional(self) -> list[tuple[str, str]] | None:
        """The positional parameters of the function call being read, each with its
        reference (`${1}`): what `"$@"` passes; None where they are known only as the
        script runs."""
        if self.arguments is None:
            return None
        return [
            (self.values.get(str(number), ""), f"${{{number}}}")
            for number in range(1, self.arguments + 1)
        ]

    def shift(self, words: list[str]) -> None:
        """`shift [N]` (`words` after `shift`) in a function call read again: its positional
        parameters move down by N (none where N is more than there are); by a count not
        known here, they are no longer known."""
        count = int(words[0]) if words[:1] and words[0].isdigit() else None if words else 1
        if self.arguments is None or (count is not None and count > self.arguments):
            return  # bash leaves them as they are where N is more than `$#`
        if count is None:
            self.arguments = None
            self.arguments_lost = "moved by a `shift` of a count known only as the script runs"
            self._forget_positional()
            return
        for number in range(1, max(self.arguments, count) + 1):
            moved = self.values.get(str(number + count))
            if moved is None:
                self.values.discard(str(number))
            else:
                self.values[str(number)] = moved
        self.arguments = max(0, self.arguments - count)

    def note_sets(self, words: list[str], line: int) -> None:
        """Take note of the variables the command `words` (on `line`) sets, inside the
        blocks open now: those a subshell among them sets are named after it (`leave`)."""
        if self.trail.starts:
            names = names_set(words)
            for simple in shell_quoting.simple_commands(words):
                names += [name for name, _how in unknowable_targets(simple)]
            self.trail.sets += [(name, line) for name in names]

    def read_opaque(self, words: list[str], line: int) -> None:
        """Take note of a command that may set any variable (`opaque_command`): a variable
        the verl command uses and no assignment after it sets is named (`opaque_origins`)."""
        for simple in shell_quoting.simple_commands(words):
            if shown := opaque_command(simple, self.values):
                self.opaque[len(self.opaque) + 1] = f"`{shown}` (line {line})"

    def opaque_origins(self, value: str) -> list[tuple[str, str]]:
        """The variables `value` uses that the last command that may set any variable
        (`read_opaque`) may have set, as no assignment after it does; each with that command."""
        if not self.opaque:
            return []
        latest = len(self.opaque)
        return [
            (name, self.opaque[latest])
            for name in dict.fromkeys(names_used(value))
            if self.set_after.get(name, 0) < latest
        ]

    def _surely_set(self, name: str) -> None:
        """`name` set where it surely runs: the commands before it no longer decide it."""
        if self.opaque:
            self.set_after[name] = len(self.opaque)

    def set_unknowable(self, name: str, how: str, line: int) -> None:
        """`name` set by `how` on `line` (`unknowable_targets`) where it surely runs: its
        value is not known here, so references to it stay as written, and are named
        (`unknowable_notes`), whatever it held before. In a block that may not run it is
        `set_maybe`: the value before it stands where the block does not run."""
        self._forget(name)
        self.unknown[name] = f"{how} (line {line})"

    def unknowable_notes(self, value: str) -> list[str]:
        """One note for each variable `value` uses that `set_unknowable` set."""
        names = dict.fromkeys(reference_name(match) for match in REFERENCE.finditer(value))
        return [
            f"${name}: set by {self.unknown[name]} to a value known only when the script runs"
            for name in names
            if name in self.unknown and name not in self.values
        ]

    def read_guarded(self, words: list[str], line: int) -> None:
        """Take note of the variables a line inside a block sets (`names_set`), without
        setting them: bash may not run it (a branch, a loop, a function not called) or runs
        it in a subshell. Each keeps the value it has outside, and is named wherever the
        verl command uses it (`origins`). A variable it makes readonly may be one: an
        `unset` of it later is known only as the script runs (`_unset`)."""
        for name in names_set(words):
            self.set_maybe(name, line)
        sets_positional = any(
            set_arguments(simple[1:]) is not None for simple in set_commands(words)
        )
        if sets_positional and not self.defining:  # read at its call
            self._forget_positional()  # `set -- a b` that may not run: `$1` is not known
            self.arguments = None
            self.arguments_lost = "set by `set --` in a block that may not run"
        for name in made_readonly(words) if not self.defining else []:  # read at its call
            if name not in self.readonly:
                self.readonly[name] = False

    def assign_in_branch(self, words: list[str], line: int) -> None:
        """Set the `NAME=value` words of a command inside a loop's body or an `if` branch:
        a verl command after it in the same branch runs only when it does, so it reads these
        values, unflagged. When the branch ends (`end_branch`) each is put back as it was
        before, and named wherever the verl command uses it (`set_maybe`): the branch may
        not have run."""
        for word in words:
            name = word.split("=", 1)[0].removesuffix("+")
            before = [table.get(name, _ABSENT) for table in self._branch_tables()]
            self.branch_sets[-1].append((name, line, before))
        self.read_line(words)

    def end_branch(self) -> None:
        """The innermost scope's branch ends (at `else`, `elif` or its block's end): what
        `assign_in_branch` set in it is put back and named, as a variable set in a block."""
        for name, line, before in reversed(self.branch_sets[-1]):
            for table, held in zip(self._branch_tables(), before, strict=True):
                if held is _ABSENT:
                    table.discard(name)
                else:
                    table[name] = held
            self.set_maybe(name, line)
        self.branch_sets[-1].clear()

    def _branch_tables(self) -> list[_Scoped[str, Any]]:
        """The tables an assignment changes (`_assign_word`): put back at a branch's end."""
        return [self.values, self.maybe, self.set_after]

    def set_maybe(self, name: str, line: int) -> None:
        """`name` set on `line` inside a block that may not run, or in a subshell: it keeps
        the value it has outside, and is named wherever the verl command uses it
        (`origins`)."""
        origin = (name, line)
        if self.defining:
            self.defined.setdefault(self.defining, set()).add(origin)
        else:
            self.ran.add(origin)
        self.maybe[name] = _kept([*self.maybe.get(name, []), origin])

    def forget_definition(self, function: str) -> None:
        """`function` is called: its body is read again there, as bash runs it, so what its
        definition set maybe (`set_maybe`: a body defined runs nothing) is dropped from the
        variables' origins, unless a command read where it runs, or may, set it too. Kept,
        a variable set before the definition stayed flagged after a call that surely runs
        (`f() { M=$M/x; }; f`, or a `local M` in the body)."""
        dropped = self.defined.pop(function, set()) - self.ran
        if not dropped:
            return
        for name, origins in list(self.maybe.items()):
            kept = [origin for origin in origins if origin not in dropped]
            if len(kept) == len(origins):
                continue
            if kept:
                self.maybe[name] = kept
            else:
                self.maybe.discard(name)

    def set_in_block(self, name: str, items: list[str], line: int) -> None:
        """The array `name` set to `items` on `line`, in a block that may not run: not set
        here (`set_maybe`), its elements are kept for `words_in_blocks`."""
        held = self.block_elements.setdefault((name, line), [])
        held += [shell_quoting.stored(self.substitute(item)) for item in items]

    def words_in_blocks(self, origins: list[tuple[str, int]]) -> list[str] | None:
        """The words the blocks of `origins` (`Variables.origins`) may set, where each set an array
        whose elements `set_in_block` kept; None where any set something else, or more
        origins than are kept: what those blocks pass is not known here."""
        if not origins or len(origins) > ORIGINS_KEPT:
            return None
        if any(origin not in self.block_elements for origin in origins):
            return None
        return [word for origin in origins for word in self.block_elements[origin]]

    def origins(self, value: str) -> list[tuple[str, int]]:
        """Where the variables `value` uses (as `$NAME`, `${NAME...}`, or a name inside
        `$(( ... ))`) are set in a block that may not run: [] when none is."""
        return _kept([origin for name in names_used(value) for origin in self.maybe.get(name, [])])

    def _set_origins(self, name: str, value: str) -> None:
        """`name` set where it surely runs: it may differ only if `value` uses a variable
        that may (`origins`)."""
        origins = self.origins(value)
        if origins:
            self.maybe[name] = origins
        else:
            self.maybe.discard(name)

    def read_line(self, words: list[str], line: int = 0) -> bool:
        """Set what the command `words` (on `line`) sets; True when the line only sets
        variables (or is `:`), so it holds no command to look at further."""
        if words and all(ASSIGNMENT.match(word) or ELEMENT.match(word) for word in words):
            for word in words:
                self._assign_word(word, "", line)
            return True
        if words[:1] and words[0] in WRAPPERS:  # `builtin export MODEL=/m/x`
            words = words[1:]
        if words[:1] == ["shift"]:
            self.shift(words[1:])
            return True
        if words[:1] == ["set"]:
            arguments = set_arguments(words[1:])
            if arguments is not None:
                self._set_positional(arguments)
            return True
        if words[:1] == ["unset"]:
            for name in unset_names(words[1:]):
                self._unset(name, line)
            for name, index in unset_elements(words[1:]):
                self._unset_element(name, index, line)
            return True
        if words[:1] and words[0] in PLAIN_OPTIONS:
            options = "".join(word[1:] for word in words[1:] if word[:1] in "-+")
            plain = set(options) <= PLAIN_OPTIONS[words[0]]
            how = "" if plain else f"`{words[0]} -{options}`"
            local = words[0] in _LOCAL and "g" not in options and self.in_function()
            for word in words[1:]:
                if word[:1] not in "-+":
                    self._declare(word, how, local, line)
            for name in made_readonly(words):
                self.readonly[name] = True
            return True
        for word in words:  # `: ${MODEL:=/models/x}` and any `${NAME=...}`: set as expanded
            if re.search(r"\$\{[A-Za-z_][A-Za-z0-9_]*:?=", word):
                self.substitute(word)
        return words[:1] == [":"]

    def _unset(self, name: str, line: int) -> None:
        """`unset NAME` as bash does it: a readonly variable keeps its value (bash refuses;
        one made readonly in a block that may not run is known only as the script runs); a
        variable local to a calling function (or set before the call's name) is removed
        from that scope, and the value it hid is seen again (`_reveal_shadowed`); any other
        is unset where it stands."""
        readonly = self.readonly.get(name)
        if readonly is not None:
            if not readonly:
                self.set_unknowable(name, "`unset` of a variable that may be readonly", line)
            return
        if not self._reveal_shadowed(name):
            self._forget(name)
            self.known_unset[name] = True

    def _unset_element(self, name: str, index: str, line: int) -> None:
        """`unset 'NAME[index]'` as bash does it: `@` or `*` unsets the whole array, an
        index (arithmetic, counted from the end where negative) removes that element, and
        index 0 of a plain variable the variable; an index known only as the script runs
        leaves the array so too, as does one after an element before the last was unset
        (the indexes bash keeps are not kept here)."""
        if index in ("@", "*"):
            self._unset(name, line)
            return
        position = shell_arithmetic.evaluate(index, self.values)
        if name in self.arrays:
            items = self.arrays[name]
            if position is None or name in self.sparse:
                how = f"`unset` of the element {name}[{index}]"
                self.set_unknowable(name, how, line)
                return
            at = position + len(items) if position < 0 else position
            if 0 <= at < len(items):
                self.arrays[name] = items[:at] + items[at + 1 :]
                self.sparse[name] = True  # the next index bash appends at is kept too
        elif name in self.values and position == 0:
            self._unset(name, line)

    def _reveal_shadowed(self, name: str) -> bool:
        """Whether `name` is local to a function call outside the innermost one being read,
        or set before the call's name (`X=b train`): `unset` in the body then removes that
        scope's variable and the value it hid stands again (bash's dynamic scoping), also
        after the call, which no longer puts it back."""
        calls = [call for call in reversed(self.calls) if call.function]
        holder = next((call for call in calls if name in call.locals), None)
        if holder is None or (holder is calls[0] and name not in holder.temporary):
            return False
        holder.temporary.discard(name)
        self._put_back(name, holder.locals.pop(name))
        return True

    def _put_back(self, name: str, before: list[Any]) -> None:
        """`name` as the tables `_local_tables` held it `before` (`make_local`), less the
        origins of a function's definition dropped since (`forget_definition`: the call
        read its body where it runs)."""
        for table, held in zip(self._local_tables(), before, strict=True):
            if table is self.maybe and held is not _ABSENT:
                held = [origin for origin in held if self._still_maybe(origin)]
            if held is _ABSENT or held == []:
                table.discard(name)
            else:
                table[name] = held

    def _still_maybe(self, origin: tuple[str, int]) -> bool:
        """Whether `origin` (`set_maybe`) is one a command read where it runs, or may, made,
        or one of a definition not yet dropped by a call (`forget_definition`)."""
        return origin in self.ran or any(origin in made for made in self.defined.values())

    def _declare(self, word: str, how: str, local: bool, line: int) -> None:
        """One word of `export`/`readonly`/`declare`/`local` (`NAME=value` or `NAME`); in a
        function's call (`local`) NAME is the call's own, and with no value it is unset
        there, as bash makes it, whatever it holds outside."""
        name = re.split(r"[+=\[]", word, maxsplit=1)[0]
        if local and NAME.fullmatch(name) and name in self._temporary():
            self._temporary().discard(name)  # now the call's own: its value before is kept
        elif local and NAME.fullmatch(name) and name not in self._locals():
            self.make_local(name)
            if name == word:
                self._forget(name)
                self.known_unset[name] = True
                return
        self._assign_word(word, how, line)

    def _locals(self) -> dict[str, list[Any]]:
        """The variables local to the innermost function call being read."""
        call = self._innermost_function_call()
        return call.locals if call is not None else {}

    def _temporary(self) -> set[str]:
        """The assignments before the name of the innermost function call being read."""
        call = self._innermost_function_call()
        return call.temporary if call is not None else set()

    def _innermost_function_call(self) -> _Call | None:
        return next((call for call in reversed(self.calls) if call.function), None)

    def _assign_word(self, word: str, how: str, line: int = 0) -> None:
        """Set one `NAME=value` (or `NAME+=more`) word: a variable's value, or where NAME
        is an array, its element 0, as bash sets it (`_assign_element`, as `NAME[2]=x`
        does). A word of a `declare` whose options change values (`how` names them: `-i`,
        `-l`, `-a`, ...) makes the variable one whose value is known only as the script
        runs (`set_unknowable`, named where it is used); a bare `NAME` (`export NAME`)
        keeps it. An assignment to a variable that is (or may be) readonly is one too: bash
        refuses it and stops the script there."""
        if element := _ELEMENT_SET.match(word):
            name, index, append, value = element.groups()
            self._assign_element(name, index, append, value, line)
            return
        assignment = ASSIGNMENT.match(word)
        if assignment is None:
            if how and NAME.fullmatch(word):
                self.set_unknowable(word, how, line)
            return
        name, append, value = assignment.groups()
        if name in self.readonly:
            self.set_unknowable(name, f"an assignment to the readonly ${name}", line)
            return
        if how:
            self.set_unknowable(name, how, line)
            return
        if name in self.arrays:
            self._assign_element(name, "0", append, value, line)
            return
        if not append:  # what `+=` adds to may come from before
            self._surely_set(name)
        self._set_origins(name, value if not append else f"${{{name}}}{value}")
        value = shell_quoting.stored(self.substitute(value))
        self.values[name] = (self.values.get(name, "") if append else "") + value

    def _assign_element(self, name: str, index: str, append: str, value: str, line: int) -> None:
        """`NAME[index]=value` (`+=` adding to the element), or `NAME=value` where NAME is
        an array (index 0), as bash sets it: an element of the array replaced, or one more
        at its end; a plain variable's value at index 0. At an index known only as the
        script runs, past the end, or of an array whose indexes are not kept here (`sparse`),
        the array is one known only as the script runs (`set_unknowable`): its words went,
        or stayed as they were, at exit 0."""
        items = self.arrays.get(name)
        position = shell_arithmetic.evaluate(index, self.values)
        if items is None and name in self.unknown and name not in self.values:
            return  # its other elements are known only as the script runs: still so
        if items is None and name not in self.values and position == 0:
            items = []
        elif items is None:
            items = [self.values[name]] if name in self.values else None
        at = None if position is None or items is None else position
        at = at + len(items) if at is not None and items is not None and at < 0 else at
        if items is None or at is None or not 0 <= at <= len(items) or name in self.sparse:
            how = f"`{name}[{index}]{append}=` (an element not read here)"
            self.set_unknowable(name, how, line)
            return
        self._set_origins(name, f"${{{name}[@]}}{value}")
        value = shell_quoting.stored(self.substitute(value))
        before = items[at] if append and at < len(items) else ""
        self.values.discard(name)
        self.arrays[name] = [*items[:at], before + value, *items[at + 1 :]]

    def _forget(self, name: str) -> None:
        self._surely_set(name)
        self.known_unset.discard(name)
        self.unknown.discard(name)
        self.values.discard(name)
        self.arrays.discard(name)
        self.sparse.discard(name)
        self.maybe.discard(name)

    def assign_array(self, name: str, words: list[str], append: bool) -> None:
        if not append:
            self._surely_set(name)
            self.sparse.discard(name)
        self._set_origins(name, " ".join(words if not append else [f"${{{name}}}", *words]))
        words = [shell_quoting.stored(self.substitute(word)) for word in words]
        scalar = self.values.get(name)  # `X=a; X+=(b)`: the value is element 0
        held = self.arrays.get(name, [] if scalar is None else [scalar])
        self.values.discard(name)
        self.arrays[name] = (held if append else []) + words

    def spread(self, words: list[str], notes: list[str]) -> list[str]:
        """`words` with each `${NAME[@]}` or `${NAME[*]}` replaced by the words bash makes
        of the array's elements (`as_words`), a slice `${NAME[@]:1:2}` by those of its
        elements and `${NAME[1]}` by the one, counted against the budget. An array the
        script does not set gives none, said in `notes`; one whose elements are known only
        when the script runs is `lost`: its keys are not here."""
        spread: list[str] = []
        for word in words:
            match = ARRAY_SPREAD.match(word)
            if match is None:
                spread.append(word)
            elif match.group(1) in self.arrays or match.group(1) in self.values:
                items = self._part(match)
                if items is None:
                    self.lost.append(f"{word}: an index or slice of the array not read here")
                    continue
                self._count(match.group(1), sum(len(item) for item in items))
                spread += self.as_words(word, items, notes)
            elif match.group(1) in self.unknown:
                self.lost.append(
                    f"{word}: set by {self.unknown[match.group(1)]} to words known only when"
                    " the script runs"
                )
            elif match.group(1) not in self.maybe:  # else set in a block: flagged where used
                notes.append(f"{word}: an array the script does not set; it passes no words")
        return spread

    def _arithmetic(self, text: str) -> int | None:
        """The integer bash makes of an index or offset `text` (expanded first: `$((i+1))`,
        `$N`); None where it is not known here."""
        return shell_arithmetic.evaluate(self.substitute(text), self.values)

    def _part(self, match: re.Match) -> list[str] | None:
        """The elements a `spread` word names of an array (a plain variable is one of one
        element): all, a slice (`:offset:length`, from the end where negative, as bash
        reads them), or one; None where an index is known only as the script runs, or the
        array's indexes are not kept here (`sparse`)."""
        name, offset, length, index = match.groups()
        items = self.arrays.get(name, [self.values.get(name, "")])
        if offset is None and index is None:
            return items
        if name in self.sparse:
            return None
        if index is not None:
            at = self._arithmetic(index)
            if at is None:
                return None
            at += len(items) if at < 0 else 0
            return items[at : at + 1] if at >= 0 else []
        start = self._arithmetic(offset)
        count = self._arithmetic(length) if length is not None else None
        if start is None or (length is not None and (count is None or count < 0)):
            return None  # a length below 0: bash stops at the array's slice
        start += len(items) if start < 0 else 0
        if start < 0:
            return []
        return items[start:] if count is None else items[start : start + count]

    def as_words(self, written: str, items: list[str], notes: list[str]) -> list[str]:
        """The words bash makes of `items` (an array's elements, a call's arguments) where
        `written` (`${A[@]}`, `"${A[*]}"`, `$@`, ...) spreads them: unquoted, each element
        split as an unquoted expansion is (`shell_quoting.expanded_word`: `"k=x y"` passes
        `k=x` and `y`); quoted `@`, one word each; quoted `*`, one word of them all joined by
        IFS's first character (`"${A[*]}"` holding two overrides is one word, which Hydra
        refuses), none where IFS is not known here, said in `notes`."""
        if 0 in getattr(written, "unquoted", ()):
            return [shell_quoting.expanded_word(item) for item in items]
        if "*" not in written:
            return list(items)
        ifs = self.ifs()
        if ifs is None:
            notes.append(
                f"{written}: one word of the elements joined by IFS's first character, and IFS"
                " is known only when the script runs; its keys are not here"
            )
            return []
        return [ifs[:1].join(items)]

    def ifs(self) -> str | None:
        """The characters bash splits unquoted expansions at: IFS's value (its `$'...'`
        strings decoded), space, tab and newline where the script leaves it unset; None
        where it is known only as the script runs (set by `read`, in a block that may not
        run, or to a value left as written)."""
        value = self.values.get("IFS")
        if "IFS" in self.unknown or "IFS" in self.maybe:
            return None
        if value is None:
            return " \t\n"
        decoded = shell_quoting.ansi_c_decoded(value)
        if decoded is None or REFERENCE.search(decoded) or "`" in decoded:
            return None
        return shell_quoting.literal(decoded)

    def fields(self, word: str) -> list[str] | None:
        """The words bash makes of `word`, expanded: what each of its unquoted expansions
        gives (`shell_quoting.Word`) split at IFS's characters (`_split_at_ifs`), an
        expansion that gives no field adding nothing; a command substitution or reference
        left as written (`$(date +%F)`, whose output bash splits) is kept whole. A word whose
        whole text an unquoted expansion gave (`Word.expanded`: an element of `${A[@]}`) is
        split as it stands. None where it stays one word with an `=` in it as written, for
        the caller to read as before, or where IFS is not known here (`ifs`): the caller
        must not read it as one word. A word whose only `=` comes from a variable (`$ARGS`
        holding `a=1 b=2`) is verl's overrides too: it was dropped."""
        unquoted = getattr(word, "unquoted", ())
        ifs = self.ifs()
        if ifs is None or not (unquoted or getattr(word, "expanded", False)):
            return None
        if getattr(word, "expanded", False):
            return _split_at_ifs(word, ifs)
        notes, copied = len(self.notes), self.copied
        fields, given, at, split = [""], [False], 0, False
        for match in REFERENCE.finditer(word):
            if match.start() not in unquoted:
                continue
            fields[-1] += self.substitute(word[at : match.start()])
            parts = _split_at_ifs(self.substitute(match.group(0)), ifs)
            if parts:
                fields[-1] += parts[0]
                fields += parts[1:]
                given = [*given[:-1], True] + [True] * (len(parts) - 1)
            split = split or len(parts) > 1
            at = match.end()
        fields[-1] += self.substitute(word[at:])
        if not split and "=" in word:
            del self.notes[notes:]  # the caller expands it again, and counts it then
            self._count_read_ahead(word, self.copied - copied)
            self.copied = copied
            return None
        return [field for field, came in zip(fields, given, strict=True) if field or came]

    def _count(self, name: str, chars: int) -> None:
        self.copied += chars
        if self.copied > self.max_chars:  # before the copy is made
            raise ExpansionTooLarge(
                f"${name}: variables expand to more than {self.max_chars} characters;"
                " not a launch script"
            )

    def _count_read_ahead(self, word: str, chars: int) -> None:
        """What `fields` copies of a word the caller then expands itself has a budget of its
        own, as large: counted with the caller's copy, a word used as often as `max_chars`
        allows was refused at half that; uncounted, a script of many such words copied
        without bound."""
        self.read_ahead += chars
        if self.read_ahead > self.max_chars:
            raise ExpansionTooLarge(
                f"{cut_to(word, 40)}: variables expand to more than {self.max_chars} characters;"
                " not a launch script"
            )

    def substitute(self, value: str) -> str:
        """`value` with the script's variables and arithmetic expanded, as bash would."""
        return shell_arithmetic.expand(REFERENCE.sub(self._expand, value), self.values)

    def _expand(self, match: re.Match) -> str:
        """One reference: the variable's value, or what its operator gives for an unset
        (or, with a colon, empty) one; as written where bash would look elsewhere."""
        name, operator, word = reference_name(match), match.group(2), match.group(3)
        value = self.values.get(name)
        if value is None and self.arrays.get(name) and name not in self.sparse:
            value = self.arrays[name][0]  # `$A` of an array: its element 0
        if value is None and name in self.unknown:  # set, to what only the running script knows
            return match.group(0)
        is_set = value is not None and (value != "" or not operator or ":" not in operator)
        if operator and operator[-1] == "+":  # the alternative for a set variable, else ""
            if is_set:
                return self.substitute(word)
            self._note(match.group(0), name, "it is empty here")
            return ""
        if is_set:
            assert value is not None
            self._count(name, len(value))
            return value
        if not operator and (
            (name.isdigit() and self.arguments is not None) or name in self.known_unset
        ):
            return ""  # a positional parameter the call does not pass, or an unset variable
        if not operator or operator[-1] == "?":  # bash takes it from elsewhere, or stops
            return match.group(0)
        if operator[-1] == "=" and name.isdigit():  # bash refuses to assign an argument
            return match.group(0)
        default = self.substitute(word)
        self._note(match.group(0), name, f"its default {word!r} is used here")
        if operator[-1] == "=":
            self._set_origins(name, word)
            self.values[name] = shell_quoting.stored(default)
        return default

    def _note(self, reference: str, name: str, what: str) -> None:
        """A note on an argument of the script (`${1:-vllm}`) read without its value; a
        variable's default is the script's own choice, and needs none."""
        if name.isdigit() and self.arguments is None:
            self.notes.append(f"{reference}: the script's argument ${name}; {what}")

    def from_environment(self, value: str, taken: list[str]) -> str:
        """`value` (substituted already) with the references the script leaves unset taken
        from this environment (`$HOME`), as the shell running it here would: a config file
        expands none, so the path must be written out. Only the value of a path key comes
        here: a script's `wandb login $WANDB_API_KEY`, a key not carried over, or
        `trainer.project_name=$GITHUB_TOKEN` (sent on to the trackers) must not put a secret
        into the config. `taken` gets each name used."""

        def replace(match: re.Match) -> str:
            name = reference_name(match)
            known = name in self.values or name in self.unknown or name in self.known_unset
            if known or name not in os.environ:
                return match.group(0)
            self._count(name, len(os.environ[name]))
            if name not in taken:
                taken.append(name)
            return os.environ[name]

        return REFERENCE.sub(replace, value)
