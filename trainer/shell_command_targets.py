"""Which variables a launch script's command sets, read from its words alone, for `mfsdp
config from-verl`: those it assigns or unsets (`names_set`, `unset_names`, `unset_elements`),
makes readonly (`made_readonly`), or sets to values known only as the script runs
(`unknowable_targets`: a `for`/`select` loop's name, `read`, `mapfile`, `printf -v`,
`getopts`, arithmetic), the positional parameters a `set` gives (`set_commands`,
`set_arguments`), whether it may set any variable at all (`opaque_command`: `source`, `eval`,
`export $(cat .env)`), and the variables a value uses (`names_used`); with the syntax of
names, assignments and references they are read by (`NAME`, `ASSIGNMENT`, `REFERENCE`).
Apart from `trainer.shell_variables`, which holds the variables' values as bash sets and
expands them: these hold no state and answer from a command's words alone, so the reader of
a script asks them without a `Variables` (`unknowable_targets`), and `shell_variables` builds
on them, never the other way round.
"""

from __future__ import annotations

import re

from trainer import shell_arithmetic, shell_quoting

ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?)=(.*)$", re.DOTALL)
# `${1:-vllm}`: a positional parameter (the script's own argument) is matched for its default;
# a default may hold `${OTHER}` (`${TRAIN_FILE:-${DATA_HOME}/train.parquet}`): braces one deep
REFERENCE = re.compile(
    r"\$\{([A-Za-z_][A-Za-z0-9_]*|[0-9]+)(?:(:?[-=+?])((?:[^{}]|\{[^{}]*\})*))?\}"
    r"|\$([A-Za-z_][A-Za-z0-9_]*|[1-9])"
)
ELEMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\[[^]]*\]\+?=")  # `NAME[2]=value`
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ELEMENT_NAMED = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\[([^]]*)\]")  # `A[0]` in `unset 'A[0]'`
_INDEXED = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\[")  # an array's `${NAME[@]}`, `${NAME[0]}`
_GUARDED_SET = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*):?=")  # `${NAME:=default}` sets NAME
# an array's assignment, `NAME=(a b)` or `NAME+=(c)`, whose first word `names_set` sees
_ARRAY_SET = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\+?=\(")
# the builtins that read variables' values from input, by the options of each that take an
# argument (`read -a NAME` sets the array NAME); with `for`/`select`, `printf -v`, `getopts`
# and arithmetic (`let`, `(( ))`, `$(( ))`) they set values only the running script knows
# (`unknowable_targets`): a `for lr in 1e-6 2e-6` sweep converted with the `lr` set before the
# loop, without a word
_INPUT_OPTIONS = {"read": "adinNptu", "mapfile": "dnOsuCc", "readarray": "dnOsuCc"}
_INPUT_DEFAULT = {"read": "REPLY", "mapfile": "MAPFILE", "readarray": "MAPFILE"}
_LOOPS = ("for", "select")
# what arithmetic sets: `N=5`, `N+=2`, `N<<=1`, `N++`, `++N` (not a comparison, `N==5`, `N<=5`)
_ARITHMETIC_SET = re.compile(
    r"(?:\+\+|--)\s*([A-Za-z_][A-Za-z0-9_]*)"
    r"|([A-Za-z_][A-Za-z0-9_]*)\s*(?:(?:[-+*/%&|^]|<<|>>)?=(?!=)|\+\+|--)"
)
# the builtins that set variables, and their options that leave a value as written (not
# `declare -i` arithmetic, `-l`/`-u` case, `-n` a reference to another variable, `-a` arrays)
PLAIN_OPTIONS = {
    "export": frozenset("fnp"),
    "readonly": frozenset("fp"),
    **{name: frozenset("xrgpfF") for name in ("declare", "typeset", "local")},
}


# the builtins that run text this does not read (a file, a string made as the script runs):
# they may set any variable (`source ~/.bashrc`, `eval "$(conda shell.bash hook)"`)
_OPAQUE = frozenset({"source", ".", "eval"})
# the words that run the builtin after them as it is (`builtin source F`, `command . F`)
WRAPPERS = frozenset({"builtin", "command"})
# an assignment's word whose name is made as the script runs (`$k=$v`, `$(cat .env)`): an
# expansion before any `=`, so it may set any variable
_NAME_MADE_AT_RUN_TIME = re.compile(r"^[^=]*[$`]")
# What such a command runs where it only sets up the environment a launch runs in (a
# virtualenv's or conda's activation, conda's, mamba's or micromamba's shell hook, its options
# and redirections too: `$('/opt/conda/bin/conda' 'shell.bash' 'hook' 2> /dev/null)`): their
# variables are PATH, PS1, VIRTUAL_ENV, CONDA_*, none a verl launch reads.
_ENVIRONMENT_SETUP = re.compile(
    r"(?:\S*/)?bin/activate|activate|(?:\S*/)?etc/profile\.d/(?:conda|mamba)\.sh"
    r"|\$\(['\"]?(?:[^\s'\"]*/)?(?:conda|mamba|micromamba)['\"]? ['\"]?shell(?:\.\w+)?['\"]?"
    r" ['\"]?hook['\"]?(?:[\w\s./='\"-]|>&?)*\)"
)


def reference_name(match: re.Match) -> str:
    """The variable a `REFERENCE` match names."""
    return match.group(1) or match.group(4)


def unknowable_targets(words: list[str]) -> list[tuple[str, str]]:
    """The variables the simple command `words` sets to values known only when the script
    runs, each with what sets it: a `for`/`select` loop's name, `read`'s, `mapfile`'s and
    `readarray`'s targets, `printf -v NAME`, `getopts`'s NAME, those arithmetic sets in
    `let`, `(( ... ))` and any word's `$(( ... ))` (arithmetic with an assignment is not
    worked out here)."""
    expanded = [
        (target, "`$(( ))`")
        for word in words
        for span in shell_arithmetic.spans(word)
        for target in arithmetic_targets(span.expression)
    ]
    return [
        (target, how)
        for target, how in _command_targets(words) + expanded
        if NAME.fullmatch(target)
    ]


def arithmetic_targets(expression: str) -> list[str]:
    """The variables the arithmetic `expression` assigns (`N = N * 2`, `N++`, `--N`)."""
    return [match.group(1) or match.group(2) for match in _ARITHMETIC_SET.finditer(expression)]


def _command_targets(words: list[str]) -> list[tuple[str, str]]:
    """The names the command `words` itself sets as it runs (`unknowable_targets`)."""
    start = _command_start(words)
    if words[start : start + 1] and words[start].startswith("(("):  # `(( N++ ))`, `((N++))`
        return [(target, "`(( ))`") for target in arithmetic_targets(" ".join(words[start:]))]
    name, arguments = (
        (words[start].lstrip("("), words[start + 1 :]) if start < len(words) else ("", [])
    )
    if name in _LOOPS:
        targets = arguments[:1] if arguments[:1] and NAME.fullmatch(arguments[0]) else []
        how = f"a `{name}` loop"
    elif name in _INPUT_OPTIONS:
        targets, how = _input_targets(name, arguments), f"`{name}`"
    elif name == "printf":
        targets, how = _printf_target(arguments), "`printf -v`"
    elif name == "getopts":
        targets, how = arguments[1:2], "`getopts`"
    elif name == "let":
        targets, how = (
            [target for word in arguments for target in arithmetic_targets(word)],
            "`let`",
        )
    else:
        return []
    return [(target, how) for target in targets]


def _command_start(words: list[str]) -> int:
    """Where the simple command `words` names the program or builtin it runs: past the
    keywords, assignments, function names and wrappers before it (`then read -r X`, `A=1
    source x`, `builtin source x`)."""
    start = 0
    while start < len(words) and (
        words[start].lstrip("(") in shell_quoting.KEYWORDS_BEFORE_COMMAND
        or words[start] in WRAPPERS
        or ASSIGNMENT.match(words[start])
        or ELEMENT.match(words[start])  # `A=1 B[2]=x`: both assignments, no command
        or words[start].endswith("()")  # a function's name: `f() { read -r MODEL; }`
        or words[start] == "function"  # with its name: `function f { read -r MODEL; }`
    ):
        start += 2 if words[start] == "function" else 1
    return start


def opaque_command(words: list[str], values: dict[str, str]) -> str:
    """The simple command `words` shown (`source env.sh`) if it may set any variable: it
    runs text this does not read (`source`, `.`, `eval`), or sets a variable whose name is
    made as it runs (`export $(cat .env)`, `declare "$NAME=1"`, `printf -v "$VAR"`); "" if
    not. An environment set-up is not one, also as the value (in `values`) of the variable
    `eval` runs (`eval "$__conda_setup"`, as `conda init` writes)."""
    start = _command_start(words)
    name = words[start].lstrip("(") if start < len(words) else ""
    arguments = words[start + 1 :]
    if name in _OPAQUE:
        runs = arguments[:1]
        return "" if runs and _sets_up_environment(runs[0], values) else " ".join([name, *runs])
    if name in PLAIN_OPTIONS or name == "unset":  # `unset $N`: the name it removes too
        named = [word for word in arguments if word[:1] not in "-+"]
    else:
        named = _printf_target(arguments) if name == "printf" else []
        name += " -v" * (name == "printf")
    made = [word for word in named if _NAME_MADE_AT_RUN_TIME.match(word)]
    return f"{name} {made[0]}" if made else ""


def _sets_up_environment(runs: str, values: dict[str, str]) -> bool:
    """Whether `runs`, what `source`/`eval` runs, is an environment set-up
    (`_ENVIRONMENT_SETUP`), written out or as the value of the one variable it names."""
    reference = REFERENCE.fullmatch(runs)
    if reference and not reference.group(2) and reference_name(reference) in values:
        runs = values[reference_name(reference)]
    return any(_ENVIRONMENT_SETUP.fullmatch(word) for word in (runs, runs[:-1]))


def _input_targets(builtin: str, arguments: list[str]) -> list[str]:
    """The names `read`/`mapfile` set: `read -a NAME`'s, and the names after the options
    (and those options' arguments) up to the first word that is not one (a redirection);
    the builtin's default name if none."""
    takes = _INPUT_OPTIONS[builtin]
    targets: list[str] = []
    index = 0
    while index < len(arguments) and arguments[index][:1] == "-" and arguments[index] != "--":
        option = arguments[index][1:]
        at = next((at for at, letter in enumerate(option) if letter in takes), len(option))
        if at < len(option):  # its argument: the rest of the word, else the next word
            attached = option[at + 1 :]
            argument = attached or "".join(arguments[index + 1 : index + 2])
            index += not attached
            targets += [argument] if option[at] == "a" else []
        index += 1
    index += arguments[index : index + 1] == ["--"]
    for word in arguments[index:]:
        if not NAME.fullmatch(word):
            break
        targets.append(word)
    return targets or [_INPUT_DEFAULT[builtin]]


def names_set(words: list[str]) -> list[str]:
    """The variables the command `words` assigns (`NAME=...`, `export`, an array, an
    element, `${NAME:=...}`) or unsets; not those `unknowable_targets` names, nor those
    assigned before the name of a command it runs (`IFS=, read -r A B`: bash sets IFS for
    `read` alone; taken as set, IFS was not known where the verl command stands)."""
    names: list[str] = []
    prefixes = _prefix_assignments(words)
    for at, word in enumerate(words):
        word = word.lstrip("(").rstrip(")")
        names += [match.group(1) for match in _GUARDED_SET.finditer(word)]
        if array := _ARRAY_SET.match(word):  # `A=(x y)`: `y)` is no command A is set for
            names.append(array.group(1))
        elif at not in prefixes and (ASSIGNMENT.match(word) or ELEMENT.match(word)):
            names.append(re.split(r"[+=\[]", word, maxsplit=1)[0])
    unset = words.index("unset") if "unset" in words else len(words)
    elements = [name for name, _index in unset_elements(words[unset + 1 :])]
    return names + unset_names(words[unset + 1 :]) + elements


def set_arguments(arguments: list[str]) -> list[str] | None:
    """The positional parameters `set` with `arguments` makes (`set -- a b`, `set -e a`);
    None where it sets options only (`set -euo pipefail`, `set -x`)."""
    index = 0
    while index < len(arguments) and arguments[index][:1] in ("-", "+"):
        if arguments[index] == "--":
            return arguments[index + 1 :]
        index += 1 + arguments[index].endswith("o")  # `-euo pipefail`: `o` takes a word
    return arguments[index:] if index < len(arguments) else None


def set_commands(words: list[str]) -> list[list[str]]:
    """The `set` commands among the simple commands of `words`."""
    return [
        simple[start:]
        for simple in shell_quoting.simple_commands(words)
        if (start := _command_start(simple)) < len(simple) and simple[start] == "set"
    ]


def _prefix_assignments(words: list[str]) -> set[int]:
    """Where in `words` the assignments before a command's name stand, in each command of
    its list or pipeline (`_command_start`): bash sets them for that command alone."""
    prefixes: set[int] = set()
    start = 0
    ends = [at for at, word in enumerate(words) if word in shell_quoting.OPERATORS]
    for end in [*ends, len(words)]:
        name_at = _command_start(words[start:end])
        if start + name_at < end:
            prefixes.update(range(start, start + name_at))
        start = end + 1
    return prefixes


def made_readonly(words: list[str]) -> list[str]:
    """The variables the command `words` makes readonly: `readonly NAME[=value]`, `declare
    -r`, `typeset -r`, `local -r` (not `readonly -f`, which marks functions)."""
    words = words[_command_start(words) :]
    if not words or words[0] not in PLAIN_OPTIONS:
        return []
    options = "".join(word[1:] for word in words[1:] if word[:1] == "-")
    if "f" in options or (words[0] != "readonly" and "r" not in options):
        return []
    named = (re.split(r"[+=\[]", word, maxsplit=1)[0] for word in words[1:] if word[:1] not in "-+")
    return [name for name in named if NAME.fullmatch(name)]


def unset_names(arguments: list[str]) -> list[str]:
    """The variables `unset` removes, given its `arguments`: the names after its options
    (`unset -v A B`); none with `-f`, which removes functions only. Read as names, the
    options hid those after them (`unset -v MODEL` in a branch was not seen to unset it)."""
    return [word for word in _unset_operands(arguments) if NAME.fullmatch(word)]


def unset_elements(arguments: list[str]) -> list[tuple[str, str]]:
    """The array elements `unset` removes, given its `arguments` (`unset 'A[0]'`): each
    array's name and the index as written. Read as no name at all, the element stayed in
    `${A[@]}`, which passes it to verl."""
    operands = (shell_quoting.literal(word) for word in _unset_operands(arguments))
    matches = (_ELEMENT_NAMED.fullmatch(word) for word in operands)
    return [(match.group(1), match.group(2)) for match in matches if match]


def _unset_operands(arguments: list[str]) -> list[str]:
    """The words after `unset`'s options, given its `arguments`; none with `-f`."""
    start = 0
    while start < len(arguments) and arguments[start][:1] == "-" and arguments[start] != "--":
        start += 1
    options = "".join(arguments[:start])
    start += arguments[start : start + 1] == ["--"]
    return [] if "f" in options else arguments[start:]


def names_used(value: str) -> list[str]:
    """The variables `value` uses: as `$NAME`, `${NAME...}`, `${NAME[@]}`, or a name inside
    `$(( ... ))`."""
    names = [reference_name(match) for match in REFERENCE.finditer(value)]
    names += _INDEXED.findall(value)
    for span in shell_arithmetic.spans(value):
        names += NAME.findall(span.expression)
    return names


def _printf_target(arguments: list[str]) -> list[str]:
    """`printf -v NAME` (or `-vNAME`): NAME."""
    if arguments[:1] == ["-v"]:
        return arguments[1:2]
    return [arguments[0][2:]] if arguments[:1] and arguments[0].startswith("-v") else []
