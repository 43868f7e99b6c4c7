"""The verl trainer command of a launch script, found among its commands and its values
expanded by the script's variables as they stand there (`trainer.verl_script_reader` finds
and follows it): arrays spread, the script's own arguments passed on named, a value bash
would give in `$'...'` quoting or over lines refused, paths taken from the environment
named, keys whose value is known only when the script runs flagged
(`trainer.verl_script_flags`); and the value of a `case` word, where bash's is known here.
A module of its own: what the command's words hold, apart from which commands run.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from trainer import shell_command_targets, shell_lines, shell_quoting, shell_variables
from trainer.verl_script_flags import flag_maybe, flag_maybe_words, flag_opaque
from trainer.verl_script_hydra import expanded_hydra_options
from trainer.verl_script_pieces import command_arguments
from trainer.verl_script_state import GRPO_MODULES, SFT_MODULES, Launch, Script, verl_module
from trainer.verl_script_torchrun import read_torchrun
from trainer.verl_source import config_class, hydra_refusal, names_a_path

# the script's own arguments passed on to verl: more overrides, known only when it runs
_FORWARDED = shell_variables.FORWARDED


def read_launch(script: Script, piece: shell_lines.Piece, number: int, source: Path) -> None:
    """Take the command `piece` (one of a list or pipeline: `shell_quoting.simple_commands`)
    on line `number` as the script's last verl trainer command if it starts one, read with
    the variables as they stand. One in a function's body is read again where the function is called
    (`verl_script_reader._read_call`); if it never is, this reading, where the body stands,
    is the one kept. Each is counted once, as written, however often it is read."""
    words, named_by = _module_spread(piece.words, script.variables)
    named = [verl_module(word) for word in words]
    for module in GRPO_MODULES + SFT_MODULES:
        if module in named:
            if not script.depth:  # read where it is written, not again
                script.launches += 1
            command = "grpo" if module in GRPO_MODULES else "sft"
            at = named.index(module)
            # less its redirections (`2>&1 | tee log`): bash gives verl none of them
            written = Launch(command, module, command_arguments(words[at + 1 :]), line=number)
            written.torchrun = read_torchrun(words[:at], script.variables, written)
            script.launch = _expand_launch(written, script.variables, source)
            script.launch.notes += [
                f"{word}: verl's trainer {module}, the variable's value in the script"
                for word in named_by
            ]


# a verl override as a command's first word (`data.train_files=/d`): a dotted name is no
# shell variable, so bash runs the word as a command, which is not found
_OVERRIDE_WORD = re.compile(r"\+{0,2}[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)+=")


def note_orphaned_overrides(script: Script, piece: shell_lines.Piece, number: int) -> None:
    """A note on a command after the verl command that is verl overrides alone: a comment
    line inside the command's `\\` continuation (verl's run_qwen3_vl-30b-megatron.sh has
    one) ends it there, as a line without its backslash does, and bash runs the lines after
    as a command of their own, which fails. The conversion reads the command as bash does,
    without them (the run trains with verl's defaults for their keys): they were lost
    without a word."""
    words = piece.words
    if script.launch is None or not words or not _OVERRIDE_WORD.match(words[0]):
        return
    keys = ", ".join(word.partition("=")[0] for word in words if "=" in word)
    note = (
        f"line {number}: {keys}: key=value words bash runs as a command of their own, not"
        " verl's: the verl command ends before them (a comment line, or a line without its"
        " trailing backslash, inside its continuation), so verl never gets them and they"
        " are not in this config; put them back in the verl command if they are its"
    )
    if note not in script.launch.notes:
        script.launch.notes.append(note)


def _module_spread(
    words: list[str], variables: shell_variables.Variables
) -> tuple[list[str], list[str]]:
    """`words` with each unquoted expansion that gives a verl trainer module replaced by the
    words bash splits it into (`Variables.fields`), and those expansions as written: verl's
    own scripts start their trainer as `torchrun ... ${ENTRYPOINT}` after
    `ENTRYPOINT=${ENTRYPOINT:-"-m verl.trainer.sft_trainer"}`, and `python3 -m $TRAINER`
    names it alike; read as written, no verl command was found there. Any other word stays
    as written, for `_expand_launch`."""
    spread: list[str] = []
    named_by: list[str] = []
    for word in words:
        fields = variables.fields(word) if "$" in word and "=" not in word else None
        if fields and any(field in GRPO_MODULES + SFT_MODULES for field in fields):
            spread += fields
            named_by.append(str(word))
        else:
            spread.append(word)
    return spread, named_by


def _expand_launch(launch: Launch, variables: shell_variables.Variables, source: Path) -> Launch:
    """`launch` with its `key=value` words expanded by the script's variables as they are
    now; every value is expanded before any is parsed, so a substitution bomb is refused
    before YAML reads megabytes. Notes made while expanding go to the launch's notes."""
    before = len(variables.notes)
    cls = config_class(launch.command)
    spread = _split(list(_spread(launch.words, variables, launch.notes)), variables, launch, source)
    for written in dict.fromkeys(launch.words):
        origins = variables.origins(written)
        outside = [word.partition("=")[0] for word, spread_from in spread if spread_from == written]
        flag_maybe_words(launch, written, origins, variables.words_in_blocks(origins), outside)
    launch.hydra = expanded_hydra_options([word for word, _written in spread], variables, launch)
    for word, written in ((shell_quoting.whole_ansi_c(w), written) for w, written in spread):
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
        if not sep and key.startswith("~"):  # Hydra's delete, `~key`: read in order with the rest
            launch.texts.append((key, ""))
        elif sep and not key.startswith("-"):
            expanded = variables.substitute(value)
            launch.refused = launch.refused or _unreadable(source, key, value, expanded, variables)
            if names_a_path(cls, key):
                expanded = variables.from_environment(expanded, launch.taken)
            launch.texts.append((key, shell_quoting.literal(expanded)))
            unknowable = variables.unknowable_notes(value)
            launch.notes += [note for note in unknowable if note not in launch.notes]
            flag_maybe(launch, key, shell_quoting.literal(expanded), variables.origins(written))
            flag_opaque(
                launch, key, shell_quoting.literal(expanded), variables.opaque_origins(written)
            )
    launch.notes[:0] = variables.notes[before:]
    del variables.notes[before:]
    return launch


def _spread(
    words: list[str], variables: shell_variables.Variables, notes: list[str]
) -> Iterator[tuple[str, str]]:
    """Each word of the command, arrays spread (`Variables.spread`) and `$@`/`$*` where the
    positional parameters are known (`Variables.forwarded`), with the word as written
    (`"${DATA[@]}"` for each of the array's words, `${1}` for the first argument): the
    variables it reads. Parameters the script set but not known here (`set -- $(cmd)`)
    are lost (`Variables.lost`): the overrides they hold are not in the config."""
    for written in words:
        if written in _FORWARDED:
            passed = variables.forwarded(written, notes)
            if passed is not None:
                yield from passed
                continue
            if variables.arguments_lost is not None:  # set by the script: not the user's
                variables.lost.append(f"{written}: {variables.arguments_lost}")
                continue
        for word in variables.spread([written], notes):
            yield word, written


def _split(
    spread: list[tuple[str, str]],
    variables: shell_variables.Variables,
    launch: Launch,
    source: Path,
) -> list[tuple[str, str]]:
    """The command's words as verl receives them: each with unquoted expansions split as
    bash splits it (`Variables.fields`), with the word as written. A word left without an
    `=` that is no option or option's argument is refused, as Hydra refuses that override
    and verl never starts (`M="/m/a b"` then `model.path=$M` passes `b`); so is a word
    whose splitting turns on an IFS known only when the script runs (read as one word, a
    `$ARGS` was dropped without a word), and an override whose value holds an `=`
    (`"${A[*]}"`: `a=1 b=2` as one word)."""
    words: list[tuple[str, str]] = []
    for word, written in spread:
        fields = variables.fields(word)
        if fields is None:
            splits = getattr(word, "unquoted", ()) or getattr(word, "expanded", False)
            if splits and variables.ifs() is None:
                _refuse(launch, f"{source}: {written}: {_IFS_UNKNOWN}")
            word, passed = _override_of(word, variables)
            if passed is not None and not _after_option(words):
                _refuse_bare(launch, source, passed, written, word)
            _note_unread(launch, word, written, _after_option(words))
            _refuse_second_equals(launch, source, word, written)
            words.append((word, written))
            continue
        for field in fields:
            after_option = _after_option(words)
            bare = not any(char in field for char in "=$") and field[:1] not in ("-", "~")
            if bare and not after_option:
                _refuse(
                    launch,
                    f"{source}: {written}: bash splits the unquoted value at IFS and passes"
                    f" {field!r} to verl as a word of its own, which Hydra refuses as an"
                    " override without '=': quote it (\"...\") to pass one word",
                )
            else:
                _note_unread(launch, field, written, after_option)
            _refuse_second_equals(launch, source, field, written)
            words.append((field, written))
    return words


def _after_option(words: list[tuple[str, str]]) -> bool:
    """Whether the next word stands after an option that takes it (`--config-name NAME`):
    the words so far, each with the word as written, end in an option without `=`."""
    return bool(words) and words[-1][0].startswith("-") and "=" not in words[-1][0]


def _refuse_bare(launch: Launch, source: Path, passed: str, written: str, word: str) -> None:
    """Refuse `launch` where verl receives `passed` (the text bash passes for `word`, no
    option, nor its argument: `_override_of`) as an override without `=` that is no Hydra
    delete (`~key`): Hydra refuses it ("missing EQUAL"; `' '` and `''` too) and verl never
    starts, where the conversion dropped it and exited 0: `optim.lr 5e-7`, a stray `x`, an
    element of an array spread (`A=(x y)`), or the `' '` a space after a line's trailing
    backslash passes."""
    hint = (
        " (a space after a line's trailing backslash passes ' ', and the lines after it are"
        " a command of their own)"
        if passed.isspace()
        else ""
    )
    shown = f"{written}: " if written != word else ""
    _refuse(
        launch,
        f"{source}: the verl command at line {launch.line}: {shown}verl receives {passed!r}"
        f" as an override without '=', which Hydra refuses, and verl does not start{hint}:"
        " write it as key=value",
    )


def _override_of(word: str, variables: shell_variables.Variables) -> tuple[str, str | None]:
    """A quoted word whose `=` comes from a variable (`"$X"` holding `k=v`, `"$1"`) as the
    override bash passes, expanded; read as written, it held no `=` and was dropped
    without a word. Any other word as it is. With it, the text bash passes where that
    holds no `=` and is known here (`_refuse_bare`); None where it holds one, is an option
    or Hydra's delete (`~key`), or is known only when the script runs (a variable set in a
    block that may not run or not by the script, the script's own argument)."""
    if (
        word.startswith(("-", "~"))
        or word in _FORWARDED
        or "=" in shell_command_targets.REFERENCE.sub("", word)
    ):
        return word, None
    notes = len(variables.notes)
    expanded = variables.substitute(word)
    if "=" in expanded:
        return expanded, None
    unknown = (
        len(variables.notes) > notes  # the script's own argument (`${1:-}`)
        or variables.origins(word)
        or variables.opaque_origins(word)
        or variables.unknowable_notes(word)
    )
    passed = shell_quoting.literal(shell_quoting.whole_ansi_c(expanded))
    if unknown or "=" in passed or any(mark in passed for mark in ("$", "`", shell_quoting.ANSI_C)):
        return word, None
    return word, passed


def _refuse_second_equals(launch: Launch, source: Path, word: str, written: str) -> None:
    """Refuse `launch` where verl receives `word` as an override whose value holds an `=`
    outside Hydra's quotes (`"${A[*]}"` joining `a=1 b=2` into one word), which Hydra
    refuses; a value holding an expansion left as written is not known here."""
    if word.startswith("-") or any(char in word for char in "$`"):
        return
    if _HYDRA_SECOND_EQUALS.match(word):
        _refuse(
            launch,
            f"{source}: {written}: verl receives {word!r} as one word, whose value holds an"
            " '=' Hydra refuses outside quotes: pass each override as a word of its own",
        )


# why a word bash splits at an IFS known only as the script runs is refused
_IFS_UNKNOWN = (
    "bash splits the unquoted value at the characters of IFS, which the script sets to a"
    " value known only when it runs: the words verl receives are not known here; set IFS"
    " plainly (IFS=$' \\t\\n') or quote the value"
)
# an override whose value holds an `=` outside Hydra's quotes (`a=1 b=2`, `a=x=y`)
_HYDRA_SECOND_EQUALS = re.compile(r"^[^=]*=(?:[^='\"]|'[^']*'|\"[^\"]*\")*=")


def _note_unread(launch: Launch, word: str, written: str, after_option: bool) -> None:
    """A note on a word of the command no part of which is read here (`_unread`): `$EXTRA`
    or `"$EXTRA"` of a variable the script does not set. Quoted, it went without a word."""
    note = (
        f"{written}: a value known only when the script runs, passed to verl as words of"
        " their own; the overrides it holds are not in this config: add them to it"
    )
    if _unread(word, after_option) and note not in launch.notes:
        launch.notes.append(note)


def _unread(word: str, after_option: bool) -> bool:
    """Whether `word` is one of verl's overrides no part of which is read here: a reference
    left as written with no `=` outside it (`$EXTRA`, set by `read` or not by the script),
    not an option, its argument, or the script's arguments (named on their own)."""
    if after_option or word.startswith("-") or word in _FORWARDED:
        return False
    return "=" not in shell_command_targets.REFERENCE.sub("", word) and "$" in word


def _refuse(launch: Launch, reason: str) -> None:
    """Refuse `launch` for `reason`, unless it is refused already (the first reason stands)."""
    launch.refused = launch.refused or reason


def _unreadable(
    source: Path, key: str, written: str, expanded: str, variables: shell_variables.Variables
) -> str:
    """Why a value is refused, in one line naming the variable it came from or the key: it
    holds bash's `$'...'` quoting (`shell_quoting`; carried over as text, it became
    `$evil\\nmodel:` and YAML made a mapping of it) or a line break (quotes spanning lines,
    which verl's command line does not take either), or a backquote bash passes as text
    (`'a`b`'`: no command substitution) where Hydra refuses the value, as it refuses a
    backquote outside its quotes. "" for any other value."""
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
    elif shell_quoting.LITERAL_BACKQUOTE in expanded and (
        refusal := hydra_refusal(shell_quoting.literal(expanded), backquotes=False)
    ):
        return f"{source}: {key}: {refusal}"
    else:
        return ""
    names = [
        shell_command_targets.reference_name(match)
        for match in shell_command_targets.REFERENCE.finditer(written)
        if mark in variables.values.get(shell_command_targets.reference_name(match), "")
    ]
    holder = f"${names[0]} (in its value)" if names else "its value"
    return f"{source}: {key}: {holder} {what}: {fix}"


def case_word_value(variables: shell_variables.Variables, word: str) -> str | None:
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
