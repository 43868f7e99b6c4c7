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

import copy
import re
import shlex
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
# `$(...)` and backquotes hold a command whose words shlex splits apart
# (`experiment_name=run_$(date +%s)` became `run_$(date`): kept whole as text, never run
_COMMAND_SUBSTITUTION = re.compile(r"\$\([^()]*\)|`[^`]*`")
_NESTING = 4  # passes over nested substitutions; a deeper one is held whole (`_hold_deeper`)
_HELD = "\ue000"  # a private-use character marks a held substitution while shlex splits
# the script's own arguments passed on to verl: more overrides, known only when it runs
_FORWARDED = ("$@", "$*", "${@}", "${*}")
# the compound commands whose header runs where the command stands (`_opens_only_its_header`)
_HEADERS = frozenset({"for", "select", "while", "until", "if"})
# what ends a line where the list or pipeline goes on at the next (`_script_commands`)
_GOES_ON = shell_quoting.OPERATORS - {"&"}
# the blocks whose body runs as a whole or not at all, and the words that start a branch of
# one before its first command (`_sets_in_branch`)
_BRANCH_CLOSERS = frozenset({"done", "fi"})
_BRANCH_STARTS = frozenset({"then", "do", "else"})
# the words before a command that leave it in the script's shell (`_past_openers`)
_OPENERS = frozenset({"{", "!", "time"})


def script_pairs(
    text: str, source: Path
) -> tuple[list[tuple[str, Any]], str, list[str], list[str], list[str], list[str]]:
    """The `key=value` arguments of the script's (last) verl trainer command, its module,
    notes on what of the command is known only when the script runs, the config file of
    the user's it names (`_hydra_config_notes`), its config-group selections that are
    not carried over (`_group_selections`), and the keys whose variables it sets in a
    block that may not run (`_flag_maybe`)."""
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
    hydra_notes, incomplete = _hydra_config_notes(launch.words, launch.command)
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
    pairs, selection_notes, refused = _group_selections(pairs, launch)
    notes = [*variables.notes, *launch.notes, *taken_notes, *notes, *hydra_notes]
    return pairs, launch.module, notes + selection_notes, incomplete, refused, launch.incomplete


@dataclass
class _Launch:
    """A verl trainer command of the script, its values expanded as they stand there (a
    variable set again after the command does not reach it)."""

    command: str  # sft | grpo
    module: str  # verl's trainer module (GRPO_MODULES, SFT_MODULES)
    words: list[str]  # its arguments as written
    texts: list[tuple[str, str]] = field(default_factory=list)  # key, value expanded
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
    # each function whose body holds a verl trainer command: that command as written
    functions: dict[str, _Launch] = field(default_factory=dict)
    # each of those functions called: the line of its last call and its values there
    calls: dict[str, tuple[int, list[tuple[str, str]]]] = field(default_factory=dict)


def _read_script(text: str, source: Path) -> tuple[_Launch, int, shell_variables.Variables]:
    """The script's last verl trainer command, how many it starts, and its variables."""
    script = _Script(shell_variables.Variables(MAX_EXPANDED_CHARS))
    bodies: list[str] = []  # here-doc bodies: text for other programs, not commands
    for number, command in _script_commands(text, source, bodies):
        _read_command(script, command, number, source)
    if script.launch is None:
        raise VerlSourceError(_no_launch_message(source, bodies))
    return script.launch, script.launches, script.variables


def _script_commands(text: str, source: Path, bodies: list[str]) -> Iterator[tuple[int, list[str]]]:
    """The script's commands in order (`A=1; B=2`: two), each with the line it starts on; a
    list or pipeline that goes on at the next line after `&&`, `||` or `|` (past blank lines
    and comments, as bash reads it) is one command: read as two, what its later commands set
    was read as run, and a `&` ending it on a later line as not running the earlier ones in
    the background. Here-doc bodies go to `bodies`."""
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
            if any(module in line for module in GRPO_MODULES + SFT_MODULES):
                raise VerlSourceError(_unparsed_launch_message(source, number)) from None
            continue  # an unbalanced quote: bash stops there, and runs no verl command in it
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
    variables it sets, the array it goes on, or the verl trainer command it is."""
    if script.array is not None:  # the next words of a bash array
        _read_array(script, words)
        return
    variables = script.variables
    for piece in script.blocks.read(words):
        opened_first = piece.opened_first()
        for _ in range(opened_first):
            variables.enter()
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
    if piece.maybe():
        script.variables.read_guarded(piece.words, number)
    script.array = shell_variables.Array(start.group(1), start.group(2) == "+")
    script.array_guarded = piece.maybe()
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
    as the script's last verl trainer command if it starts one. One in a function's body is
    kept as written too, to be expanded where the function is called (`_read_call`); if it
    never is, it is read with the variables where the body stands."""
    words = piece.words
    for module in GRPO_MODULES + SFT_MODULES:
        if module in words:
            script.launches += 1
            command = "grpo" if module in GRPO_MODULES else "sft"
            written = _Launch(command, module, words[words.index(module) + 1 :])
            if piece.function:
                script.functions[piece.function] = written
            script.launch = _expand_launch(copy.deepcopy(written), script.variables, source)


def _read_call(script: _Script, piece: shell_lines.Piece, number: int, source: Path) -> None:
    """Take the command `piece` as a call of a function that starts verl, outside any
    function's body: bash expands the verl command's variables as they stand at the call
    (`MODEL=/m/b` set after the definition and before the call is the one passed), so the
    launch is read again here and is the script's last. A function called again with other
    values is flagged: this config is its last call's."""
    words = _past_openers(piece.words)
    if piece.function or not words or words[0] not in script.functions:
        return
    name = words[0]
    launch = _expand_launch(copy.deepcopy(script.functions[name]), script.variables, source)
    if name in script.calls:
        before, texts = script.calls[name]
        changed = [f"{key}={value}" for key, value in launch.texts if (key, value) not in texts]
        if changed:
            launch.notes.append(
                f"{', '.join(changed)}: {name} (which starts verl) is called on line {before}"
                f" and again on line {number} with other values; this config is the last"
                " call's: convert the other from a script of its own"
            )
            launch.incomplete += changed
    script.calls[name] = (number, launch.texts)
    script.launch = launch


def _expand_launch(launch: _Launch, variables: shell_variables.Variables, source: Path) -> _Launch:
    """`launch` with its `key=value` words expanded by the script's variables as they are
    now; every value is expanded before any is parsed, so a substitution bomb is refused
    before YAML reads megabytes. Notes made while expanding go to the launch's notes."""
    before = len(variables.notes)
    cls = config_class(launch.command)
    for word, written in _spread(launch.words, variables, launch.notes):
        if word in _FORWARDED:
            launch.notes.append(
                f"{word}: the script passes its own arguments on to verl; the overrides it is "
                "run with are not in this config: add them to it"
            )
            continue
        key, sep, value = word.partition("=")
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
    """Each word of the command, arrays spread (`Variables.spread`), with the word as
    written (`"${DATA[@]}"` for each of the array's words): the variables it reads."""
    for written in words:
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


def _unparsed_launch_message(source: Path, line: int) -> str:
    """A verl command this cannot split into words (a quote that never closes): said, as
    skipping it converted another command of the script, or none, without a word."""
    return (
        f"{source}: line {line}: a verl command whose quotes do not close (bash stops there"
        " with a syntax error): fix the quoting to convert it"
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


def _hydra_config_notes(words: list[str], command: str) -> tuple[list[str], list[str]]:
    """A note on the YAML the command loads with Hydra's --config-path / --config-name and,
    for a file of the user's, those options again: its settings are not in this conversion
    (they were left out without a word, then named at exit 0). verl's own configs hold
    verl's defaults (`verl_hydra_files`), which need nothing carried."""
    given = _hydra_options(words)
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
    pairs: list[tuple[str, Any]], launch: _Launch
) -> tuple[list[tuple[str, Any]], list[str], list[str]]:
    """`pairs` less the Hydra config-group selections (`optim=fsdp`), a note naming those
    that select the file verl's trainer config already selects (they change nothing), and
    "key=option: why" for each other selection: a run under another file's defaults (a
    megatron optimizer, a critic) is not the run this conversion describes."""
    config = verl_hydra_files.loaded_config(
        launch.module, *_config_path_and_name(_hydra_options(launch.words))
    )
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
