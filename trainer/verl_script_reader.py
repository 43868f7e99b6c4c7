"""Reading a verl launch script's commands in order, as bash runs them, for
`trainer.verl_script`: the blocks each opens and closes, the variables it sets
(`trainer.shell_variables`), a bash array over lines, the words bash brace-expands
(`trainer.shell_braces`), the verl trainer command it is
(`trainer.verl_script_launch`), and a function's body read again where it is called and a
loop's for its next pass, within bounds on how often and how deep. Reading a command and
reading a body again call each other, so they stand in one module; the script's text is
split into commands by `trainer.verl_script_lines`, a command's words classed by
`trainer.verl_script_pieces`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
from collections.abc import Iterator
from pathlib import Path

from trainer import shell_braces, shell_command_targets, shell_lines, shell_quoting, shell_variables
from trainer.verl_script_flags import compare_calls, flag_recursive
from trainer.verl_script_launch import case_word_value, note_orphaned_overrides, read_launch
from trainer.verl_script_lines import no_launch_message, script_commands, stop_at_unparsed
from trainer.verl_script_pieces import (
    BRANCH_STARTS,
    command_arguments,
    opens_only_its_header,
    past_openers,
    sets_in_branch,
)
from trainer.verl_script_state import Body, Launch, Script, verl_module
from trainer.verl_source import MAX_EXPANDED_CHARS, VerlSourceError

# the commands read again, all told (`_read_again`): a function's body where it is called, a
# loop's body for its next pass; functions that call each other twice at each of 40 levels
# read 2**40 bodies
MAX_READ_AGAIN = 1 << 16
# how many readings again (`_read_again`: a function's body at its call, a loop's next
# pass) may be open inside each other. bash sets no such bound (FUNCNEST is unset), and
# a script may chain a few hundred functions (a bound of 100 refused such); what a reading
# costs is its commands (`MAX_READ_AGAIN`), but each level open also holds
# `_FRAMES_PER_READING` frames of Python's stack, which the read is given
# (`_stack_for_readings`). A function calling itself is never read again (`_read_call`),
# so only a chain of distinct functions, or loops nested as deep, reaches the bound.
MAX_READ_DEPTH = 1000
# the Python frames one reading again holds while the next opens inside it: `_read_again`,
# `_read_command`, `_read_pieces`, `_read_piece_scopes`, `_read_piece`, `_read_call` (or
# `_mark_bodies`, `_flag_next_pass`), with room to spare
_FRAMES_PER_READING = 10


@dataclasses.dataclass
class _MaybeUnset(Body):
    """A function's body that `unset -f` in a block that may not run (on line `unset_at`)
    may have removed: bash then runs no body at its call (`command not found`), so the verl
    command the call starts is one of two runs (`_flag_maybe_unset`)."""

    unset_at: int = 0


def read_script(text: str, source: Path) -> tuple[Launch, int, shell_variables.Variables]:
    """The script's last verl trainer command, how many it starts, and its variables."""
    script = Script(shell_variables.Variables(MAX_EXPANDED_CHARS))
    script.blocks = shell_lines.Blocks(functools.partial(case_word_value, script.variables))
    bodies: list[str] = []  # here-doc bodies: text for other programs, not commands
    unparsed: list[tuple[int, str]] = []  # the line whose quotes never close, if any
    with _stack_for_readings():
        for number, command in script_commands(text, source, bodies, unparsed):
            _read_command(script, command, number, source)
    if unparsed:
        stop_at_unparsed(script, source, *unparsed[0])
    if script.launch is None:
        raise VerlSourceError(no_launch_message(source, bodies, text))
    flag_recursive(script.launch, script.recursive)
    return script.launch, script.launches, script.variables


@contextlib.contextmanager
def _stack_for_readings() -> Iterator[None]:
    """Python's recursion limit raised, while the script is read, to hold `MAX_READ_DEPTH`
    readings again inside each other (`_FRAMES_PER_READING` frames each) above the frames
    open now; put back after. The readings call each other in Python only, which takes no
    C stack per frame, so the limit, not the thread's stack, is what a deep chain meets."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(max(before, before + MAX_READ_DEPTH * _FRAMES_PER_READING))
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


def _read_command(script: Script, words: list[str], number: int, source: Path) -> None:
    """Take one command of the script (on line `number`), a list or pipeline piece by piece
    (`shell_lines.Blocks.read`): the blocks each opens and closes, each a scope of the
    variables (`shell_lines.Piece.scopes`: what a subshell sets is seen inside it only), the
    variables it sets, the array it goes on, or the verl trainer command it is; and the
    function and loop bodies it starts or ends (`_mark_bodies`)."""
    script.read.append((number, words))
    launch = script.launch
    rest = words
    if script.array is not None:  # the next words of a bash array, and what follows it
        rest = _read_array(script, words)
    if rest:
        pieces = script.blocks.read(rest)
        _mark_bodies(script, source, len(words) - len(rest))
        _read_pieces(script, pieces, number, source)
    if script.launch is not launch:
        for body in script.recording:
            body.launch_at = len(script.read) - 1


def _mark_bodies(script: Script, source: Path, skipped: int) -> None:
    """Take where the command read last starts or ends a function's or a loop's body
    (`shell_lines.Blocks.marks`, `skipped` words after the command's start: those that
    ended an array over lines): a function's is kept, to be read where it is called; a
    loop's that started verl is read again for its next pass, before the command that ends
    it runs, as bash reads the body again at the end of a pass (`_flag_next_pass`)."""
    index = len(script.read) - 1
    for kind, name, at in ((kind, name, at + skipped) for kind, name, at in script.blocks.marks):
        if kind != "end":
            script.recording.append(Body(name, script.read, index, at))
        elif script.recording:
            body = script.recording.pop()
            body.last, body.end = index, at
            if body.function:
                _define(script, body)
                script.starters.clear()
            elif body.launch_at >= 0:
                _flag_next_pass(script, body, source)


def _define(script: Script, body: Body) -> None:
    """Keep a function's body just read, as bash defines it: where the definition may not
    run, a function an `unset -f` may have removed (`_MaybeUnset`) may still be unset."""
    before = script.functions.get(body.function)
    surely = not script.recording and not script.blocks.inside()
    if isinstance(before, _MaybeUnset) and not surely:
        body = _MaybeUnset(**vars(body), unset_at=before.unset_at)
    script.functions[body.function] = body


def _read_pieces(
    script: Script, pieces: list[shell_lines.Piece], number: int, source: Path
) -> None:
    """Take a command's pieces: the scopes each opens and closes, and what it sets or runs;
    a piece in a case arm that never runs sets and runs nothing. What a piece of a
    function's body read at its definition sets is said to be the definition's
    (`Variables.defining`)."""
    outer = script.variables.defining
    try:
        for piece in pieces:
            script.variables.defining = piece.function
            _read_piece_scopes(script, piece, number, source)
    finally:
        script.variables.defining = outer


def _read_piece_scopes(script: Script, piece: shell_lines.Piece, number: int, source: Path) -> None:
    """Take one piece of a command: the scopes it opens, what it sets or runs, and the
    scopes it closes."""
    variables = script.variables
    opened_first = piece.opened_first()
    for _ in range(opened_first):
        variables.enter()
    if piece.skipped:  # an array it starts is read on, and not set
        while piece.words and (rest := _starts_array(script, piece, number)) is not None:
            piece = dataclasses.replace(piece, words=rest)
    else:
        piece = dataclasses.replace(piece, words=_brace_expanded(piece.words))
        variables.note_sets(piece.words, number)
        variables.read_opaque(piece.words, number)
        while piece.words:
            rest = _starts_array(script, piece, number)
            if rest is None:
                _read_piece(script, piece, number, source)
                break
            piece = dataclasses.replace(piece, words=_brace_expanded(rest))
    for scope in piece.scopes[opened_first:]:
        if scope is None:
            variables.enter()
        else:
            variables.leave(subshell=scope)


def _starts_array(script: Script, piece: shell_lines.Piece, number: int) -> list[str] | None:
    """Whether the command `piece` starts a bash array `NAME=( ...`, also as `declare -a
    NAME=(` (`local -a`, `typeset -a`: local to a function's call as `local NAME` makes
    it), then read on to its `)` by `_read_array`; one that may not run is not set
    (`Variables.read_guarded`). None where it starts none; else the words after the
    array's `)` in `piece` (`A=(x) B=(y)`: B is set too), for the caller to read on."""
    declared = _declared_array(piece.words)
    start = shell_variables.ARRAY_START.match(piece.words[declared])
    if start is None:
        return None
    if piece.maybe() and not piece.skipped:
        script.variables.read_guarded(piece.words, number)
    elif declared and not piece.skipped:
        script.variables.read_line([piece.words[0], start.group(1)], number)
    script.array = shell_variables.Array(start.group(1), start.group(2) == "+")
    script.array_guarded = piece.maybe() or piece.skipped
    script.array_line = number
    rest = piece.words[declared + 1 :]
    return _read_array(script, [start.group(3), *rest] if start.group(3) else rest)


def _declared_array(words: list[str]) -> int:
    """Where in the command `words` an array's `NAME=(` may stand: after `declare -a`
    (`typeset -a`, `local -a`), else first."""
    return 2 if len(words) > 2 and words[:2] in _DECLARE_ARRAY else 0


# the declarations that set an array as `NAME=(` does (`_starts_array`)
_DECLARE_ARRAY = [[builtin, "-a"] for builtin in ("declare", "typeset", "local")]


def _brace_expanded(words: list[str]) -> list[str]:
    """The words of one command as bash brace-expands them (`shell_braces`): all but the
    keywords and assignments before its name (`X={a,b}` sets the text `{a,b}`), and none
    of a `case` word or `[[ ... ]]` test, which bash does not expand."""
    if (
        not words
        or words[0] in ("case", "[[")
        or shell_variables.ARRAY_START.match(words[_declared_array(words)])
    ):
        return words  # an array's elements are expanded as it is read (`_read_array`)
    before = 0
    while before < len(words) and (
        words[before] in shell_quoting.KEYWORDS_BEFORE_COMMAND
        or shell_command_targets.ASSIGNMENT.match(words[before])
    ):
        before += 1
    expanded = [made for word in words[before:] for made in shell_braces.expanded_words(word)]
    return words[:before] + expanded


def _element_words(word: str) -> list[str]:
    """The elements bash brace-expands an array's `word` into; the array's closing `)`
    written on its last element (`b{1,2})`) closes it after the last only."""
    end = shell_variables.array_end(word)
    if end is None:
        return shell_braces.expanded_words(word)
    made = shell_braces.expanded_words(shell_quoting.sliced(word, 0, end))
    return [word] if len(made) == 1 else [*made[:-1], shell_quoting.glued(made[-1], word[end:])]


def _read_array(script: Script, words: list[str]) -> list[str]:
    """Take the next words of the bash array being read, each brace-expanded as bash
    expands an array's elements; set it once its `)` is read. The words after that `)`
    (`A=(x) B=(y)`, `y) && python3 ...` ending an array over lines) are returned, for
    the caller to read as bash does: what follows the assignment."""
    assert script.array is not None
    closing = next(
        (at for at, word in enumerate(words) if shell_variables.array_end(word) is not None),
        len(words),
    )
    elements = [made for word in words[: closing + 1] for made in _element_words(word)]
    if script.array.read(elements) is None:
        return []
    array = script.array
    if not script.array_guarded:
        script.variables.assign_array(array.name, array.items, array.append)
    elif (array.name, script.array_line) in script.variables.maybe.get(array.name, []):
        script.variables.set_in_block(array.name, array.items, script.array_line)
    script.array = None
    return words[closing + 1 :]


def _read_piece(script: Script, piece: shell_lines.Piece, number: int, source: Path) -> None:
    """Take one command of a list or pipeline: the variables it sets (maybe, as in a block
    that may not run or after `&&`/`||`: `piece.maybe()`), or the verl trainer command it
    is."""
    variables = script.variables
    note_orphaned_overrides(script, piece, number)
    if piece.block == "fi" and piece.words[0] in ("else", "elif"):
        variables.end_branch()  # what the branch before set is not seen in this one
    if sets_in_branch(piece):
        variables.assign_in_branch(piece.words[piece.words[0] in BRANCH_STARTS :], number)
        return
    if piece.maybe():
        variables.read_guarded(piece.words, number)
        if not piece.function and not piece.skipped:  # a body read where it is called
            _maybe_unset_functions(script, past_openers(piece.words), number)
    else:
        _unset_functions(script, past_openers(piece.words))
    sets_only = not piece.maybe() and variables.read_line(past_openers(piece.words), number)
    sets_surely = (
        not piece.inside
        and not piece.conditional
        and (not piece.blocked or opens_only_its_header(piece))
    )
    for name, how in shell_command_targets.unknowable_targets(piece.words):
        if sets_surely:
            variables.set_unknowable(name, how, number)
        else:  # `read MODEL` in an uncalled function erased the MODEL set before it
            variables.set_maybe(name, number)
    if not sets_only:  # `: $((N = 8))` and `BS=$((N++))` set N too
        launch, lost = script.launch, len(variables.lost)
        read_launch(script, piece, number, source)
        if script.launch is not launch and script.launch is not None:
            _list_lost_words(script.launch, variables, lost)
        del variables.lost[lost:]
        _read_call(script, piece, number, source)


def _list_lost_words(launch: Launch, variables: shell_variables.Variables, lost: int) -> None:
    """List among the keys of `launch` still to add (`Launch.incomplete`) the words its
    command passes that are not read here (`Variables.lost`, from index `lost` on): an
    array's whose elements the reading does not know. Named in a note only, they went at
    exit 0, and the config trained with mfsdp's defaults for the keys they set."""
    launch.incomplete += [item for item in variables.lost[lost:] if item not in launch.incomplete]


def _read_call(script: Script, piece: shell_lines.Piece, number: int, source: Path) -> None:
    """Take the command `piece` as a call of a function the script defines (outside a
    function's body, or in one being read again): bash runs its body there, with the
    variables as they stand at the call, its arguments as `$1`, `$2`, ... and the
    assignments before its name (`LR=5 train`) seen by the body only; so the body is read
    again here, and a verl command in it is the script's last. What it sets stands after
    the call (`setb() { B=sglang; }` sets B), less its `local` variables; where the call
    may not run, it is put back and named (`Variables.leave_call`). A function that starts
    verl called again with other values is flagged: this config is its last call's. A
    function called from its own body is not read again: what it sets is named, and if it
    starts verl, that is another run (`flag_recursive`)."""
    words = past_openers(_past_keywords(piece.words))
    assignments = 0
    while assignments < len(words) and shell_command_targets.ASSIGNMENT.match(words[assignments]):
        assignments += 1
    name, arguments = (
        (words[assignments:][:1] or [""])[0],
        command_arguments(words[assignments + 1 :]),
    )
    if piece.function or name not in script.functions:
        return
    variables, body = script.variables, script.functions[name]
    if name in (called for called, _line in script.calling):
        for line, command in body.commands():
            variables.read_guarded(command, line)
        if _starts_verl(script, name):
            script.recursive.append((name, number))
        return
    launch = script.launch
    lines = tuple(line for _called, line in script.calling)
    variables.forget_definition(name)
    variables.enter_call(arguments)
    for assignment in words[:assignments]:
        variables.make_temporary(assignment.split("=", 1)[0].removesuffix("+"))
    variables.read_line(words[:assignments], number)
    script.calling.append((name, number))
    try:
        _read_again(script, body.commands(), source)
    finally:
        script.calling.pop()
        variables.leave_call(stands=True if not piece.maybe() else None)
    if script.launch is not launch and script.launch is not None and not script.quiet:
        compare_calls(script, (lines, name), number, script.launch)
        if isinstance(body, _MaybeUnset):
            _flag_maybe_unset(script.launch, name, body.unset_at)


def _past_keywords(words: list[str]) -> list[str]:
    """`words` after the keywords a command may follow (`then train`, `do train`, `if
    train`): the command is the one after them."""
    keywords = 0
    while keywords < len(words) and words[keywords] in shell_quoting.KEYWORDS_BEFORE_COMMAND:
        keywords += 1
    return words[keywords:]


def _flag_maybe_unset(launch: Launch, name: str, line: int) -> None:
    """Each key of the verl command a call of `name` starts, flagged where an `unset -f`
    in a block that may not run may have removed the function: bash then starts no verl
    there."""
    launch.notes.append(
        f"{name} (which starts verl) may be unset on line {line} in a block that may not run:"
        " then its call starts nothing; check each key"
    )
    launch.incomplete += [
        f"{key}={value}" for key, value in launch.texts if f"{key}={value}" not in launch.incomplete
    ]


def _unset_functions(script: Script, words: list[str]) -> None:
    """Take the command `words`, where it surely runs, as an `unset` of the script's
    functions (`_unset_names`): a call after it runs no body (a verl command in one was
    converted as the script's run)."""
    for name in _unset_names(script, words):
        del script.functions[name]
        script.starters.clear()
        script.variables.forget_definition(name)  # its body no longer runs


def _maybe_unset_functions(script: Script, words: list[str], number: int) -> None:
    """Take the command `words` (on line `number`), in a block that may not run, as an
    `unset` of the script's functions (`_unset_names`): each may or may not be defined at
    a call after it (`_MaybeUnset`)."""
    for name in _unset_names(script, words):
        script.functions[name] = _MaybeUnset(**vars(script.functions[name]), unset_at=number)


def _unset_names(script: Script, words: list[str]) -> list[str]:
    """The script's functions the command `words` unsets: `unset -f NAME`, or a plain
    `unset NAME` where no variable NAME is set, as bash then unsets the function; after
    the keywords before it (`then unset -f train`)."""
    words = _past_keywords(words)
    words = words[words[:1] in (["builtin"], ["command"]) :]
    if words[:1] != ["unset"]:
        return []
    options = "".join(word[1:] for word in words[1:] if word[:1] == "-" and word != "--")
    names = [word for word in command_arguments(words[1:]) if word[:1] != "-"]
    variables = script.variables
    return [
        name
        for name in dict.fromkeys(names)
        if name in script.functions
        and (
            "f" in options
            or (
                not options
                and not any(name in table for table in (variables.values, variables.arrays))
            )
        )
    ]


def _starts_verl(script: Script, name: str) -> bool:
    """Whether the function `name` starts verl: its body holds a verl trainer command or
    calls a function that does; followed call by call from a list, not Python's stack (a
    chain of hundreds of functions each calling the next)."""
    if name not in script.starters:
        seen, waiting, found = {name}, [name], False
        while waiting and not found:
            function = script.functions.get(waiting.pop())
            words = [
                word
                for _line, command in (function.commands() if function else [])
                for word in command
            ]
            found = any(
                verl_module(word) is not None or script.starters.get(word, False) for word in words
            )
            waiting += [word for word in words if word in script.functions and word not in seen]
            seen.update(words)
        script.starters[name] = found
    return script.starters[name]


def _read_again(script: Script, commands: list[tuple[int, list[str]]], source: Path) -> None:
    """Read `commands`, a body the script runs again, with blocks of their own (each is
    read whole, as a body at the top level of the script would be), under the variables
    as they stand: the caller puts back what they set."""
    if script.depth >= MAX_READ_DEPTH:
        line = commands[0][0] if commands else 0
        raise VerlSourceError(
            f"{source}: line {line}: its functions and loops are read again more than"
            f" {MAX_READ_DEPTH} deep inside each other (functions calling each other): not a"
            " launch script"
        )
    saved = script.blocks, script.read, script.array, script.recording
    script.blocks = shell_lines.Blocks(script.blocks.word_value)
    script.read, script.array, script.recording = [], None, []
    script.depth += 1
    try:
        for number, words in commands:
            script.again += 1
            if script.again > MAX_READ_AGAIN:
                raise VerlSourceError(
                    f"{source}: its functions and loops read more than {MAX_READ_AGAIN}"
                    " commands again (functions calling each other over and over): not a"
                    " launch script"
                )
            _read_command(script, words, number, source)
    finally:
        script.blocks, script.read, script.array, script.recording = saved
        script.depth -= 1


def _flag_next_pass(script: Script, body: Body, source: Path) -> None:
    """A loop whose body started verl ends: its next pass reads the variables as the body
    left them, so the body is read again up to that verl command (`_read_again`), and each
    key whose value differs there is flagged: a value set after the command in the loop
    (`for s in 1 2; do python3 ... lr=$LR; LR=...; done`) is the one its second run gets."""
    launch = script.launch
    assert launch is not None
    kept = script.launch, dict(script.functions), dict(script.calls), len(script.variables.notes)
    script.quiet += 1
    script.variables.enter_call(None)
    try:
        _read_again(script, body.commands(through=body.launch_at), source)
        again = script.launch
    finally:
        script.variables.leave_call(stands=False)
        script.quiet -= 1
        script.launch, script.functions, script.calls, notes = kept
        script.starters.clear()
        del script.variables.notes[notes:]
    if again is launch or again is None:
        return
    second = dict(again.texts)
    flagged = {item.split("=", 1)[0] for item in launch.incomplete}
    flagged_again = {item.split("=", 1)[0] for item in again.incomplete}
    line = body.read[body.first][0]
    for key, value in launch.texts:
        differs = second.get(key, value) != value or key in flagged_again
        if differs and key not in flagged:
            launch.notes.append(
                f"{key}={value}: the loop whose body starts on line {line} sets it again after"
                f" the verl command, for its next pass ({key}={second.get(key, value)} there,"
                " or a value known only when the script runs): this config is the first"
                " pass's: check it, and convert the others from scripts of their own"
            )
            launch.incomplete.append(f"{key}={value}")
