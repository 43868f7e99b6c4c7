"""Reading a verl launch script, for `mfsdp config from-verl`: the `key=value` arguments of
its (last) `python3 -m verl.trainer.main_ppo` or verl SFT trainer command, its Hydra options
(--config-path / --config-name, config-group selections), and notes on what of them is known
only when the script runs.

Apart from `trainer.verl_import`, which converts the pairs to an mfsdp config, as this reads
bash as bash runs it, with `trainer.shell_lines` and `trainer.shell_quoting` (lines, quotes,
commands), `trainer.shell_variables` (variables expanded where the command stands, arrays
`NAME=( ... )` spread where `"${NAME[@]}"` stands) and `trainer.shell_arithmetic`; what a
script shares with a YAML config (the bounded YAML reader, error and expansion limit, which
keys name a path, how a value and verl's own config files are named in a note) is
`trainer.verl_source`'s.
Nothing in the script is executed.
"""

from __future__ import annotations

import contextlib
import functools
import re
import shlex
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer import shell_arithmetic, shell_lines, shell_quoting, shell_variables, verl_hydra_files
from trainer.config_yaml import ExpansionBudget
from trainer.verl_source import (
    MAX_EXPANDED_CHARS,
    VerlSourceError,
    config_class,
    names_a_path,
    parse_bounded,
    verl_defaults_words,
    yaml_shown,
)

# A launch command, continuations joined, is a few KiB; shlex builds each word a character at
# a time (quadratic: a 1 MiB word took 25 s), so a longer line is refused before it splits.
MAX_LINE_CHARS = 64 << 10
GRPO_MODULES = ("verl.trainer.main_ppo",)
SFT_MODULES = ("verl.trainer.fsdp_sft_trainer", "verl.trainer.sft_trainer")
_MODULES = frozenset(GRPO_MODULES + SFT_MODULES)
# `$(...)` and backquotes hold a command whose words shlex splits apart
# (`experiment_name=run_$(date +%s)` became `run_$(date`): kept whole as text, never run
_COMMAND_SUBSTITUTION = re.compile(r"\$\([^()]*\)|`[^`]*`")
_NESTING = 4  # passes over nested substitutions; a deeper one is held whole (`_hold_deeper`)
_HELD = "\ue000"  # a private-use character marks a held substitution while shlex splits
# the script's own arguments passed on to verl: more overrides, known only when it runs
_FORWARDED = shell_variables.FORWARDED
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
# the compound commands whose header runs where the command stands (`_opens_only_its_header`)
_HEADERS = frozenset({"for", "select", "while", "until", "if"})
# what ends a line where the list or pipeline goes on at the next (`_script_commands`)
_GOES_ON = shell_quoting.OPERATORS - {"&"}
# the blocks whose body runs as a whole or not at all, and the words that start a branch of
# one before its first command (`_sets_in_branch`)
_BRANCH_CLOSERS = frozenset({"done", "fi"})
_BRANCH_STARTS = frozenset({"then", "do", "else"})
# a redirection (`2>&1`, `>log`, `2>`, `&>`): the word after one standing alone is its file
_REDIRECTION = re.compile(r"[0-9]*(?:[<>]&?|&>)>?(?:&?[0-9-]*)?")
# the words before a command that leave it in the script's shell (`_past_openers`)
_OPENERS = frozenset({"{", "!", "time"})


def script_pairs(
    text: str, source: Path
) -> tuple[list[tuple[str, Any]], str, list[str], list[str], list[str], list[str], str | None]:
    """The `key=value` arguments of the script's (last) verl trainer command, its module,
    notes on what of the command is known only when the script runs, the config file of
    the user's it names (`_hydra_config_notes`), its config-group selections that are
    not carried over (`_group_selections`), the keys whose variables it sets in a block
    that may not run (`_flag_maybe`), and the trainer config of verl's it loads
    (`verl_hydra_files.loaded_config`; None for one of the user's): the settings verl reads
    before the command's, such as the actor's backend `ppo_megatron_trainer` sets."""
    try:
        launch, launches, variables = _read_script(text, source)
    except shell_variables.ExpansionTooLarge as err:
        raise VerlSourceError(f"{source}: {err}") from None
    if launch.refused:
        raise VerlSourceError(launch.refused)
    notes: list[str] = []
    if launches > 1:
        notes.append(
            f"the script starts verl {launches} times; this config is its last command's:"
            " convert the others from a script of their own"
        )
    hydra_notes, incomplete = _hydra_config_notes(launch.hydra, launch.command)
    pairs = []
    # the values make one config: one budget for them all, as large as the script's
    # variables may make them (each value's aliases count as often as they are used)
    budget = ExpansionBudget(max_chars=MAX_EXPANDED_CHARS)
    for key, text_value in launch.texts:
        if _COMMAND_SUBSTITUTION.search(text_value):  # the shell's output, text here
            parsed: Any = text_value
        else:
            parsed = (
                parse_bounded(text_value, f"{source}: {key}", budget)
                if text_value.strip()
                else None
            )
        pairs.append((key, parsed))
    taken_notes = [
        f"${name}: taken from this environment, as the shell running the script here would"
        for name in launch.taken
    ]  # named, never quoted: the config is a file people share
    config = verl_hydra_files.loaded_config(launch.module, *_config_path_and_name(launch.hydra))
    pairs, selection_notes, refused = _group_selections(pairs, config)
    notes = [*variables.notes, *launch.notes, *taken_notes, *notes, *hydra_notes]
    return (
        pairs,
        launch.module,
        notes + selection_notes,
        incomplete,
        refused,
        launch.incomplete,
        config,
    )


@dataclass
class _Launch:
    """A verl trainer command of the script, its values expanded as they stand there (a
    variable set again after the command does not reach it)."""

    command: str  # sft | grpo
    module: str  # verl's trainer module (GRPO_MODULES, SFT_MODULES)
    words: list[str]  # its arguments as written
    texts: list[tuple[str, str]] = field(default_factory=list)  # key, value expanded
    hydra: dict[str, str] = field(default_factory=dict)  # its Hydra options, values expanded
    notes: list[str] = field(default_factory=list)
    taken: list[str] = field(default_factory=list)  # environment variables put into paths
    refused: str = ""  # why one of its values cannot be read (`_unreadable`)
    incomplete: list[str] = field(default_factory=list)  # keys to check (`_flag_maybe`)


@dataclass
class _Script:
    """What reading a script's commands in order has found so far (`_read_command`)."""

    variables: shell_variables.Variables
    launch: _Launch | None = None  # its last verl trainer command
    launches: int = 0
    array: shell_variables.Array | None = None  # a bash array being read, over lines
    array_guarded: bool = False  # that array is set in a block that may not run: not set here
    blocks: shell_lines.Blocks = field(default_factory=shell_lines.Blocks)
    # the commands read so far, each with its line, in the reading going on (the script's,
    # or a body's read again: `_read_again`), and the bodies open in it
    read: list[tuple[int, list[str]]] = field(default_factory=list)
    recording: list[_Body] = field(default_factory=list)
    functions: dict[str, _Body] = field(default_factory=dict)  # each function's body
    starters: dict[str, bool] = field(default_factory=dict)  # whether each starts verl
    # each function that starts verl, called (under the calls being read again, by their
    # lines): the line of its last call and its values there
    calls: dict[tuple[tuple[int, ...], str], tuple[int, list[tuple[str, str]]]] = field(
        default_factory=dict
    )
    calling: list[tuple[str, int]] = field(default_factory=list)  # the calls being read again
    # the calls of a function that starts verl made from its own body (or a function it
    # calls), each with its line: not read again, each another run of verl (`_read_call`)
    recursive: list[tuple[str, int]] = field(default_factory=list)
    again: int = 0  # commands read again so far (`MAX_READ_AGAIN`)
    depth: int = 0  # how many readings again are going on
    quiet: int = 0  # how many of them read a loop's next pass only to compare its values


@dataclass
class _Body:
    """A function's or a loop's body: where it starts and ends among the commands of the
    reading it stands in (`_Script.read`), to be read again where bash runs it again: a
    function's where it is called, a loop's for its next pass (`_flag_next_pass`)."""

    function: str  # the function whose body it is; "" for a loop's
    read: list[tuple[int, list[str]]]  # the commands of the reading it stands in
    first: int  # its first command there, and the word of it the body starts at
    start: int
    last: int = -1  # its last command (the one that ends it), and the word that ends it
    end: int = 0
    launch_at: int = -1  # its command that last started verl (`_read_command`); -1 if none

    def commands(self, through: int | None = None) -> list[tuple[int, list[str]]]:
        """Its commands (each with its line), up to the command `through` if given."""
        last = self.last if through is None else through
        commands = []
        for index in range(self.first, last + 1):
            number, words = self.read[index]
            stop = self.end if index == self.last else len(words)
            words = words[self.start if index == self.first else 0 : stop]
            commands += [(number, words)] if words else []
        return commands


def _read_script(text: str, source: Path) -> tuple[_Launch, int, shell_variables.Variables]:
    """The script's last verl trainer command, how many it starts, and its variables."""
    script = _Script(shell_variables.Variables(MAX_EXPANDED_CHARS))
    script.blocks = shell_lines.Blocks(functools.partial(_case_word_value, script.variables))
    bodies: list[str] = []  # here-doc bodies: text for other programs, not commands
    unparsed: list[tuple[int, str]] = []  # the line whose quotes never close, if any
    with _stack_for_readings():
        for number, command in _script_commands(text, source, bodies, unparsed):
            _read_command(script, command, number, source)
    if unparsed:
        _stop_at_unparsed(script, source, *unparsed[0])
    if script.launch is None:
        raise VerlSourceError(_no_launch_message(source, bodies))
    _flag_recursive(script.launch, script.recursive)
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


def _script_commands(
    text: str, source: Path, bodies: list[str], unparsed: list[tuple[int, str]]
) -> Iterator[tuple[int, list[str]]]:
    """The script's commands in order (`A=1; B=2`: two), each with the line it starts on; a
    list or pipeline that goes on at the next line after `&&`, `||` or `|` (past blank lines
    and comments, as bash reads it) is one command: read as two, what its later commands set
    was read as run, and a `&` ending it on a later line as not running the earlier ones in
    the background. Here-doc bodies go to `bodies`. At a line whose quotes never close they
    end, that line (its number and text) put in `unparsed`: bash reads and runs a script
    command by command, so the commands before it have run when it stops there
    (`_stop_at_unparsed`); one that goes on into it has not."""
    going_on: list[str] = []  # a list or pipeline not ended yet
    start = 0  # the line it starts on
    for number, line in shell_lines.logical_lines(text, bodies):
        if len(line) > MAX_LINE_CHARS:
            raise VerlSourceError(
                f"{source}: a line of {len(line)} characters (continuations joined) starting "
                f"{line[:40]!r}, more than the {MAX_LINE_CHARS} a launch command needs"
            )
        try:
            words = _shell_words(line)
        except ValueError:
            if going_on:
                raise VerlSourceError(_unparsed_line_message(source, number, line)) from None
            unparsed.append((number, line))
            return
        for command in shell_quoting.commands(words):
            start = start if going_on else number
            going_on += command
            if going_on[-1] not in _GOES_ON:
                yield start, going_on
                going_on = []
    if going_on:
        yield start, going_on


def _read_command(script: _Script, words: list[str], number: int, source: Path) -> None:
    """Take one command of the script (on line `number`), a list or pipeline piece by piece
    (`shell_lines.Blocks.read`): the blocks each opens and closes, each a scope of the
    variables (`shell_lines.Piece.scopes`: what a subshell sets is seen inside it only), the
    variables it sets, the array it goes on, or the verl trainer command it is; and the
    function and loop bodies it starts or ends (`_mark_bodies`)."""
    script.read.append((number, words))
    launch = script.launch
    if script.array is not None:  # the next words of a bash array
        _read_array(script, words)
    else:
        pieces = script.blocks.read(words)
        _mark_bodies(script, source)
        _read_pieces(script, pieces, number, source)
    if script.launch is not launch:
        for body in script.recording:
            body.launch_at = len(script.read) - 1


def _mark_bodies(script: _Script, source: Path) -> None:
    """Take where the command read last starts or ends a function's or a loop's body
    (`shell_lines.Blocks.marks`): a function's is kept, to be read where it is called; a
    loop's that started verl is read again for its next pass, before the command that ends
    it runs, as bash reads the body again at the end of a pass (`_flag_next_pass`)."""
    index = len(script.read) - 1
    for kind, name, at in script.blocks.marks:
        if kind != "end":
            script.recording.append(_Body(name, script.read, index, at))
        elif script.recording:
            body = script.recording.pop()
            body.last, body.end = index, at
            if body.function:
                script.functions[body.function] = body
                script.starters.clear()
            elif body.launch_at >= 0:
                _flag_next_pass(script, body, source)


def _read_pieces(
    script: _Script, pieces: list[shell_lines.Piece], number: int, source: Path
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


def _read_piece_scopes(
    script: _Script, piece: shell_lines.Piece, number: int, source: Path
) -> None:
    """Take one piece of a command: the scopes it opens, what it sets or runs, and the
    scopes it closes."""
    variables = script.variables
    opened_first = piece.opened_first()
    for _ in range(opened_first):
        variables.enter()
    if piece.skipped:  # an array it starts is read on, and not set
        if piece.words:
            _starts_array(script, piece, number)
    else:
        variables.note_sets(piece.words, number)
        variables.read_opaque(piece.words, number)
        if piece.words and not _starts_array(script, piece, number):
            _read_piece(script, piece, number, source)
    for scope in piece.scopes[opened_first:]:
        if scope is None:
            variables.enter()
        else:
            variables.leave(subshell=scope)


def _starts_array(script: _Script, piece: shell_lines.Piece, number: int) -> bool:
    """Whether the command `piece` starts a bash array `NAME=( ...` (then read on to its
    `)` by `_read_array`); one that may not run is not set (`Variables.read_guarded`)."""
    start = shell_variables.ARRAY_START.match(piece.words[0])
    if start is None:
        return False
    if piece.maybe() and not piece.skipped:
        script.variables.read_guarded(piece.words, number)
    script.array = shell_variables.Array(start.group(1), start.group(2) == "+")
    script.array_guarded = piece.maybe() or piece.skipped
    _read_array(script, [start.group(3), *piece.words[1:]] if start.group(3) else piece.words[1:])
    return True


def _read_array(script: _Script, words: list[str]) -> None:
    """Take the next words of the bash array being read; set it once its `)` is read."""
    assert script.array is not None
    if script.array.read(words):
        if not script.array_guarded:
            array = script.array
            script.variables.assign_array(array.name, array.items, array.append)
        script.array = None


def _read_piece(script: _Script, piece: shell_lines.Piece, number: int, source: Path) -> None:
    """Take one command of a list or pipeline: the variables it sets (maybe, as in a block
    that may not run or after `&&`/`||`: `piece.maybe()`), or the verl trainer command it
    is."""
    variables = script.variables
    if piece.block == "fi" and piece.words[0] in ("else", "elif"):
        variables.end_branch()  # what the branch before set is not seen in this one
    if _sets_in_branch(piece):
        variables.assign_in_branch(piece.words[piece.words[0] in _BRANCH_STARTS :], number)
        return
    if piece.maybe():
        variables.read_guarded(piece.words, number)
    sets_only = not piece.maybe() and variables.read_line(_past_openers(piece.words))
    sets_surely = (
        not piece.inside
        and not piece.conditional
        and (not piece.blocked or _opens_only_its_header(piece))
    )
    for name, how in shell_variables.unknowable_targets(piece.words):
        if sets_surely:
            variables.set_unknowable(name, how, number)
        else:  # `read MODEL` in an uncalled function erased the MODEL set before it
            variables.set_maybe(name, number)
    if not sets_only:  # `: $((N = 8))` and `BS=$((N++))` set N too
        _read_launch(script, piece, source)
        _read_call(script, piece, number, source)


def _sets_in_branch(piece: shell_lines.Piece) -> bool:
    """Whether the command only sets variables (`NAME=value`, nothing known only when it
    runs) inside a loop's body or an `if` branch, where it runs whenever the verl command
    after it there does (`Variables.assign_in_branch`)."""
    words = piece.words[piece.words[0] in _BRANCH_STARTS :]
    return (
        piece.inside
        and not piece.conditional
        and piece.block in _BRANCH_CLOSERS
        and bool(words)
        and all(shell_variables.ASSIGNMENT.match(word) for word in words)
        and not any(word.split("=", 1)[1].startswith("(") for word in words)
        and not shell_variables.unknowable_targets(words)
    )


def _opens_only_its_header(piece: shell_lines.Piece) -> bool:
    """Whether the command is a loop's or condition's header and nothing else that may not
    run: a `for`/`select` loop sets its name, and a `while`/`until`/`if` condition (`while
    read -r line`) runs, where the command stands, whether the body runs or not."""
    words = piece.words
    return words[0] in _HEADERS and not any(word.startswith("(") for word in words[1:])


def _past_openers(words: list[str]) -> list[str]:
    """`words` less the words at their start that leave the command after them in the
    script's shell: `{` opening groups, `!` and `time` (`time -p`). In `{ MODEL=/m/g; }`,
    which always runs, and `! MODEL=/m/g`, `MODEL=/m/g` is a command that only sets a
    variable."""
    start = 0
    while start < len(words) and words[start] in _OPENERS:
        start += 1 + (words[start] == "time" and words[start + 1 : start + 2] == ["-p"])
    return words[start:]


def _read_launch(script: _Script, piece: shell_lines.Piece, source: Path) -> None:
    """Take the command `piece` (one of a list or pipeline: `shell_quoting.simple_commands`)
    as the script's last verl trainer command if it starts one, read with the variables as
    they stand. One in a function's body is read again where the function is called
    (`_read_call`); if it never is, this reading, where the body stands, is the one kept.
    Each is counted once, as written, however often it is read."""
    words = piece.words
    for module in GRPO_MODULES + SFT_MODULES:
        if module in words:
            if not script.depth:  # read where it is written, not again
                script.launches += 1
            command = "grpo" if module in GRPO_MODULES else "sft"
            written = _Launch(command, module, words[words.index(module) + 1 :])
            script.launch = _expand_launch(written, script.variables, source)


def _read_call(script: _Script, piece: shell_lines.Piece, number: int, source: Path) -> None:
    """Take the command `piece` as a call of a function the script defines (outside a
    function's body, or in one being read again): bash runs its body there, with the
    variables as they stand at the call, its arguments as `$1`, `$2`, ... and the
    assignments before its name (`LR=5 train`) seen by the body only; so the body is read
    again here, and a verl command in it is the script's last. What it sets stands after
    the call (`setb() { B=sglang; }` sets B), less its `local` variables; where the call
    may not run, it is put back and named (`Variables.leave_call`). A function that starts
    verl called again with other values is flagged: this config is its last call's. A
    function called from its own body is not read again: what it sets is named, and if it
    starts verl, that is another run (`_flag_recursive`)."""
    words = piece.words
    keywords = 0  # `then train`, `do train`, `if train`: the call is the command after them
    while keywords < len(words) and words[keywords] in shell_quoting.KEYWORDS_BEFORE_COMMAND:
        keywords += 1
    words = _past_openers(words[keywords:])
    assignments = 0
    while assignments < len(words) and shell_variables.ASSIGNMENT.match(words[assignments]):
        assignments += 1
    name, arguments = (words[assignments:][:1] or [""])[0], _arguments(words[assignments + 1 :])
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
        variables.make_local(assignment.split("=", 1)[0].removesuffix("+"))
    variables.read_line(words[:assignments])
    script.calling.append((name, number))
    try:
        _read_again(script, body.commands(), source)
    finally:
        script.calling.pop()
        variables.leave_call(stands=True if not piece.maybe() else None)
    if script.launch is not launch and script.launch is not None and not script.quiet:
        _compare_calls(script, (lines, name), number, script.launch)


def _flag_recursive(launch: _Launch, recursive: list[tuple[str, int]]) -> None:
    """Each key of the config flagged where a function that starts verl calls itself
    (`_read_call`): bash starts verl again there, with values not read here."""
    if not recursive:
        return
    name, line = recursive[0]
    launch.notes.append(
        f"{name} (which starts verl) calls itself on line {line}, starting verl again with"
        " values known only when the script runs: this config is one run's: check each key"
    )
    launch.incomplete += [
        f"{key}={value}" for key, value in launch.texts if f"{key}={value}" not in launch.incomplete
    ]


def _arguments(words: list[str]) -> list[str]:
    """A command's arguments less its redirections (`2>&1`, `> log.txt`)."""
    arguments: list[str] = []
    target_next = False  # after a redirection operator standing alone: its file
    for word in words:
        redirection = _REDIRECTION.match(word)
        if not target_next and redirection is None:
            arguments.append(word)
        target_next = redirection is not None and redirection.end() == len(word)
    return arguments


def _compare_calls(
    script: _Script, key: tuple[tuple[int, ...], str], number: int, launch: _Launch
) -> None:
    """A function that starts verl called on line `number` (`key`: the lines of the calls
    it is read under, and its name): called before with other values, the keys that
    differ are flagged, as this config is the last call's."""
    name = key[1]
    if key in script.calls:
        before, texts = script.calls[key]
        changed = [f"{key}={value}" for key, value in launch.texts if (key, value) not in texts]
        if changed:
            launch.notes.append(
                f"{', '.join(changed)}: {name} (which starts verl) is called on line {before}"
                f" and again on line {number} with other values; this config is the last"
                " call's: convert the other from a script of its own"
            )
            launch.incomplete += [item for item in changed if item not in launch.incomplete]
    script.calls[key] = (number, launch.texts)


def _starts_verl(script: _Script, name: str) -> bool:
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
            found = any(word in _MODULES or script.starters.get(word, False) for word in words)
            waiting += [word for word in words if word in script.functions and word not in seen]
            seen.update(words)
        script.starters[name] = found
    return script.starters[name]


def _read_again(script: _Script, commands: list[tuple[int, list[str]]], source: Path) -> None:
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


def _flag_next_pass(script: _Script, body: _Body, source: Path) -> None:
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


def _case_word_value(variables: shell_variables.Variables, word: str) -> str | None:
    """The value of a `case` word where it stands (`shell_lines.Blocks`), where bash's is
    known here: not where it uses a variable set in a block that may not run, or by a
    command that may set any, or to a value known only when the script runs, or an
    argument of the script's (`${1:-vllm}`), or holds a command."""
    notes = len(variables.notes)
    value = variables.substitute(word)
    argument = len(variables.notes) > notes
    del variables.notes[notes:]
    unknown = (
        argument
        or variables.origins(word)
        or variables.opaque_origins(word)
        or variables.unknowable_notes(word)
        or any(mark in value for mark in ("$", "`", shell_quoting.ANSI_C))
    )
    return None if unknown else shell_quoting.literal(value)


def _expand_launch(launch: _Launch, variables: shell_variables.Variables, source: Path) -> _Launch:
    """`launch` with its `key=value` words expanded by the script's variables as they are
    now; every value is expanded before any is parsed, so a substitution bomb is refused
    before YAML reads megabytes. Notes made while expanding go to the launch's notes."""
    before = len(variables.notes)
    cls = config_class(launch.command)
    spread = list(_spread(launch.words, variables, launch.notes))
    launch.hydra = _expanded_hydra_options([word for word, _written in spread], variables, launch)
    for word, written in spread:
        if word in _FORWARDED:
            whose = (
                "the function it stands in passes its arguments, known only when the script runs,"
                if variables.in_function()
                else "the script passes its own arguments"
            )
            launch.notes.append(
                f"{word}: {whose} on to verl; the overrides it is run with are not in this"
                " config: add them to it"
            )
            continue
        key, sep, value = word.partition("=")
        key = shell_quoting.literal(key)  # `"a[0]=1"`: its `[` was marked as quoted
        if sep and not key.startswith("-"):
            expanded = variables.substitute(value)
            launch.refused = launch.refused or _unreadable(source, key, value, expanded, variables)
            if names_a_path(cls, key):
                expanded = variables.from_environment(expanded, launch.taken)
            launch.texts.append((key, shell_quoting.literal(expanded)))
            unknowable = variables.unknowable_notes(value)
            launch.notes += [note for note in unknowable if note not in launch.notes]
            _flag_maybe(launch, key, shell_quoting.literal(expanded), variables.origins(written))
            _flag_opaque(
                launch, key, shell_quoting.literal(expanded), variables.opaque_origins(written)
            )
    launch.notes[:0] = variables.notes[before:]
    del variables.notes[before:]
    return launch


def _spread(
    words: list[str], variables: shell_variables.Variables, notes: list[str]
) -> Iterator[tuple[str, str]]:
    """Each word of the command, arrays spread (`Variables.spread`) and `"$@"` in a call
    whose arguments are known, with the word as written (`"${DATA[@]}"` for each of the
    array's words, `${1}` for the first argument): the variables it reads."""
    positional = variables.positional()
    for written in words:
        if written in ("$@", "${@}") and positional is not None:
            yield from positional  # a function's known arguments (`train 1e-6 "k=v"`)
            continue
        for word in variables.spread([written], notes):
            yield word, written


def _flag_maybe(launch: _Launch, key: str, value: str, origins: list[tuple[str, int]]) -> None:
    """A key whose value comes from a variable set inside a block (an `if` or `case` branch,
    a loop, a function body, after `&&`/`||`) or a subshell or pipeline: whether bash runs
    the block is known only when the script runs (a function that is called is named too),
    and what a subshell sets is not seen after it, so the value the variable has outside is
    used and the key is to check; a variable with no value outside stays as written
    (`value` still names it), and is said to be left unresolved, not used."""
    if not origins:
        return
    lines: dict[str, list[str]] = {}
    for name, line in origins[: shell_variables.ORIGINS_KEPT]:
        lines.setdefault(name, []).append(str(line))
    shown = ", ".join(
        f"${name} (line{'s' * (len(numbers) > 1)} {', '.join(numbers)})"
        for name, numbers in lines.items()
    ) + (" and more" if len(origins) > shell_variables.ORIGINS_KEPT else "")
    left = {
        shell_variables.reference_name(match) for match in shell_variables.REFERENCE.finditer(value)
    }
    unresolved = [f"${name}" for name, _line in origins if name in left]
    outcome = (
        f"with no value outside it, {', '.join(dict.fromkeys(unresolved))} is left unresolved:"
        " set the value here"
        if unresolved
        else "the value set outside it is used here: check it"
    )
    launch.notes.append(
        f"{key}={value}: {shown} set inside a block (an if/case branch, a loop, a function, or"
        " after && or ||) that may not run, or in a subshell or pipeline, whose settings are"
        f" not seen after it; {outcome}"
    )
    launch.incomplete.append(f"{key}={value}")


def _flag_opaque(launch: _Launch, key: str, value: str, origins: list[tuple[str, str]]) -> None:
    """A key whose value uses a variable that a command may set (`source FILE`, `. FILE`,
    `eval ...`, which run text not read here, or `export $(cat .env)`, whose names are made
    as it runs), as no assignment after that command sets it: the value bash gives is known
    only when the script runs, and the key is to check. A script that sources `~/.bashrc`
    before setting every variable its verl command uses converts as before."""
    if not origins:
        return
    names = ", ".join(f"${name}" for name, _command in origins)
    launch.notes.append(
        f"{key}={value}: {names} may be set by {origins[0][1]}, which may set any variable,"
        f" and no assignment after it sets {'them' if len(origins) > 1 else 'it'}: check it"
    )
    launch.incomplete.append(f"{key}={value}")


def _unreadable(
    source: Path, key: str, written: str, expanded: str, variables: shell_variables.Variables
) -> str:
    """Why a value is refused, in one line naming the variable it came from or the key: it
    holds bash's `$'...'` quoting (`shell_quoting`; carried over as text, it became
    `$evil\\nmodel:` and YAML made a mapping of it) or a line break (quotes spanning lines,
    which verl's command line does not take either). "" for any other value."""
    if shell_quoting.ANSI_C in expanded:
        mark = shell_quoting.ANSI_C
        what = (
            "is written in bash's $'...' quoting, whose escapes (\\n, \\t, ...) are not read here"
        )
        fix = "write the value in plain quotes"
    elif "\n" in expanded:
        mark = "\n"
        what = "holds a line break (quoted text spanning lines)"
        fix = "write the value on one line"
    else:
        return ""
    names = [
        shell_variables.reference_name(match)
        for match in shell_variables.REFERENCE.finditer(written)
        if mark in variables.values.get(shell_variables.reference_name(match), "")
    ]
    holder = f"${names[0]} (in its value)" if names else "its value"
    return f"{source}: {key}: {holder} {what}: {fix}"


def _stop_at_unparsed(script: _Script, source: Path, number: int, line: str) -> None:
    """The script read up to line `number`, whose quotes never close (`_script_commands`):
    bash stops there with a syntax error, after running the commands before it. A verl
    command among them that stands outside any block still open there has run, with the
    words read (the lines after it cannot change them), and a note says where bash stops;
    otherwise the line is refused (`_unparsed_line_message`): a block that goes on into it
    never runs, no verl command before it was started, or the text from it on (a quote
    never closed runs to the end) holds one, which may be the run meant."""
    stops_before_verl = any(module in line for module in _MODULES)
    if script.launch is None or script.blocks.open or script.array is not None or stops_before_verl:
        raise VerlSourceError(_unparsed_line_message(source, number, line))
    script.launch.notes.append(
        f"line {number}: quotes that do not close: bash runs the commands before it, the"
        " verl command among them, then stops there with a syntax error; the lines from"
        " there on are not read"
    )


def _unparsed_line_message(source: Path, number: int, line: str) -> str:
    """A line this cannot split into words (a quote that never closes): said, whatever it
    holds. Skipping it converted another verl command of the script, or none, and skipping
    an assignment kept the value the variable had before, without a word."""
    launch = any(module in line for module in GRPO_MODULES + SFT_MODULES)
    what = "a verl command whose quotes" if launch else "quotes that"
    return (
        f"{source}: line {number}: {what} do not close (bash stops there with a syntax"
        " error): fix the quoting to convert it"
    )


def _no_launch_message(source: Path, bodies: list[str]) -> str:
    """No verl trainer command among the script's commands: one inside a here-doc (a job
    script fed to `sbatch <<EOF`) is text another program reads, and said so."""
    if any(module in body for body in bodies for module in GRPO_MODULES + SFT_MODULES):
        return (
            f"{source}: the verl command is inside a here-doc (<<WORD ... WORD: text another"
            " program reads, such as a job script fed to sbatch): put that command in a"
            " script of its own to convert it"
        )
    return (
        f"{source}: no `python3 -m verl.trainer.main_ppo ...` or verl SFT trainer "
        "command found (or give a verl YAML config)"
    )


# Hydra's options that name the YAML a verl command starts from (`--config-path=DIR`,
# `--config-name NAME`): its keys are not on the command line
_HYDRA_CONFIG_OPTIONS = ("--config-path", "--config-name", "-cp", "-cn")


def _expanded_hydra_options(
    words: list[str], variables: shell_variables.Variables, launch: _Launch
) -> dict[str, str]:
    """The command's Hydra options (`_hydra_options`, of its words with arrays spread), each
    value expanded by the variables as the `key=value` words are: `--config-name=$CFG` with
    `CFG=ppo_megatron_trainer` loads verl's Megatron trainer config (read as a config of the
    user's named `$CFG`, its backend was not told). A value from a variable set in a block
    that may not run, or by a command that may set any, is flagged as a key's is."""
    given = _hydra_options(words)
    for option, written in given.items():
        value = shell_quoting.literal(variables.substitute(written))
        _flag_maybe(launch, option, value, variables.origins(written))
        _flag_opaque(launch, option, value, variables.opaque_origins(written))
        given[option] = value
    return given


def _hydra_config_notes(given: dict[str, str], command: str) -> tuple[list[str], list[str]]:
    """A note on the YAML the command loads with Hydra's --config-path / --config-name
    (`given`, expanded: `_expanded_hydra_options`) and, for a file of the user's, those
    options again: its settings are not in this conversion (they were left out without a
    word, then named at exit 0). verl's own configs hold verl's defaults
    (`verl_hydra_files`), which need nothing carried."""
    if not given:
        return [], []
    path, name = _config_path_and_name(given)
    shown = ", ".join(f"{option} {value}".strip() for option, value in given.items())
    if verl_hydra_files.is_verl_config(path, name):
        return [f"{shown}: {verl_defaults_words(command)}"], []
    return [
        f"{shown}: verl loads its settings from that YAML first; they are not in"
        " this config: convert it with `mfsdp config from-verl FILE.yaml` and merge the two"
    ], [shown]


def _hydra_options(words: list[str]) -> dict[str, str]:
    """The command's Hydra --config-path / --config-name options (and short forms), given
    as `--option=value` or `--option value`."""
    given: dict[str, str] = {}
    for index, word in enumerate(words):
        option, sep, value = word.partition("=")
        if option in _HYDRA_CONFIG_OPTIONS:
            given[option] = value if sep else (words[index + 1] if index + 1 < len(words) else "")
    return given


def _config_path_and_name(given: dict[str, str]) -> tuple[str | None, str | None]:
    return given.get("--config-path", given.get("-cp")), given.get(
        "--config-name", given.get("-cn")
    )


def _group_selections(
    pairs: list[tuple[str, Any]], config: str | None
) -> tuple[list[tuple[str, Any]], list[str], list[str]]:
    """`pairs` less the Hydra config-group selections (`optim=fsdp`), a note naming those
    that select the file verl's trainer config (`config`, the command loads) already
    selects (they change nothing), and "key=option: why" for each other selection: a run
    under another file's defaults (a megatron optimizer, a critic) is not the run this
    conversion describes."""
    kept, same, refused = [], [], []
    for key, option in pairs:
        if verl_hydra_files.selected_group(key) is None:
            kept.append((key, option))
            continue
        why = verl_hydra_files.unlike_verl_selection(key, option, config)
        shown = f"{key}={yaml_shown(option)}"
        if why is None:
            same.append(shown)
        else:
            refused.append(f"{shown}: {why}")
    notes = [f"{', '.join(same)}: the file verl's {config} config selects anyway"] if same else []
    return kept, notes, refused


def _shell_words(line: str) -> list[str]:
    """shlex's words of `line`, each command substitution in it one piece of text."""
    line = shell_quoting.mark(line)
    if _HELD in line:
        return shlex.split(line)
    held: list[str] = []

    def hold_text(text: str) -> str:
        held.append(text)
        return f"{_HELD}{len(held) - 1}{_HELD}"

    def hold(match: re.Match) -> str:
        return hold_text(match.group(0))

    line = shell_arithmetic.ARITHMETIC.sub(hold, line)  # `$((1024 * 2))` is one word too
    for _ in range(_NESTING):  # innermost first; each pass reads the whole line
        line = _COMMAND_SUBSTITUTION.sub(hold, line)
    line = _hold_deeper(line, hold_text)
    marker = re.compile(f"{_HELD}([0-9]+){_HELD}")

    def restore(text: str) -> str:
        while marker.search(text):  # a held piece holds only pieces held before it
            text = marker.sub(lambda m: held[int(m.group(1))], text)
        return text

    return [restore(word) for word in shlex.split(line)]


def _hold_deeper(line: str, hold: Callable[[str], str]) -> str:
    """`line` with each `$(` the passes of `_shell_words` left (nested deeper than
    `_NESTING`, or never closed) held whole, to its matching `)` or the end of the line:
    split as shlex splits it, the words inside became settings of their own
    (`run_$(echo a.b=999 ...)` set a.b)."""
    out: list[str] = []
    index = 0
    while (start := line.find("$(", index)) >= 0:
        depth, end = 0, len(line)
        for position in range(start + 1, len(line)):
            depth += (line[position] == "(") - (line[position] == ")")
            if depth == 0:
                end = position + 1
                break
        out += [line[index:start], hold(line[start:end])]
        index = end
    return "".join(out) + line[index:]
