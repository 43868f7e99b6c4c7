"""The keys of a verl launch script's command to check (`Launch.incomplete`), each with a
note: a value from a variable set in a block that may not run (`flag_maybe`) or by a
command that may set any (`flag_opaque`), a function that starts verl calling itself
(`flag_recursive`) or called again with other values (`compare_calls`). A module of its own
so that the command's values (`trainer.verl_script_launch`), its Hydra options
(`trainer.verl_script_hydra`) and the reading of calls (`trainer.verl_script_reader`) flag
keys alike, none importing another for it.
"""

from __future__ import annotations

from trainer import shell_command_targets, shell_variables
from trainer.verl_keys import ignored_at_any_value
from trainer.verl_script_state import Launch, Script


def flag_maybe(launch: Launch, key: str, value: str, origins: list[tuple[str, int]]) -> None:
    """A key whose value comes from a variable set inside a block (an `if` or `case` branch,
    a loop, a function body, after `&&`/`||`) or a subshell or pipeline: whether bash runs
    the block is known only when the script runs (a function that is called is named too),
    and what a subshell sets is not seen after it, so the value the variable has outside is
    used and the key is to check; a variable with no value outside stays as written
    (`value` still names it), and is said to be left unresolved, not used."""
    if not origins:
        return
    left = {
        shell_command_targets.reference_name(match)
        for match in shell_command_targets.REFERENCE.finditer(value)
    }
    unresolved = [f"${name}" for name, _line in origins if name in left]
    outcome = (
        f"with no value outside it, {', '.join(dict.fromkeys(unresolved))} is left unresolved:"
        " set the value here"
        if unresolved
        else "the value set outside it is used here: check it"
    )
    launch.notes.append(f"{key}={value}: {_set_in_a_block(origins)}; {outcome}")
    launch.incomplete.append(f"{key}={value}")


def flag_maybe_words(
    launch: Launch,
    written: str,
    origins: list[tuple[str, int]],
    words: list[str] | None,
    outside: list[str],
) -> None:
    """A word of the command whose overrides, not only their values, come from a variable
    set inside a block that may not run (`flag_maybe`): `"${EXTRA[@]}"` or `$EXTRA` after
    `if [ "$USE_LORA" = 1 ]; then EXTRA=(...lora_rank=64); fi`. The words it holds outside
    the block are read (their keys flagged by `flag_maybe`); those only the block sets
    were dropped without a word, and the conversion exited 0 without the LoRA keys. A word
    whose key is written out (`lr=$LR`) is `flag_maybe`'s alone. Where the `words` the
    blocks set are known (arrays' elements) and each sets a key the word passes outside
    them too (`outside`, each flagged by `flag_maybe`) or one ignored at any value (Ray's
    settings), the blocks add no key, and the word is not named."""
    if not origins or written.startswith("-") or "$" not in written.partition("=")[0]:
        return
    if words is not None and all(
        "=" in word
        and (
            word.partition("=")[0] in outside
            or ignored_at_any_value(launch.command, word.partition("=")[0])
        )
        for word in words
    ):
        return
    lines = sorted({line for _name, line in origins})
    launch.notes.append(
        f"{written}: {_set_in_a_block(origins)}; the words it passes where that block runs"
        " are not followed here (this config has only those it holds outside it): pass them"
        " as overrides in the command, or add them to this config"
    )
    launch.incomplete.append(
        f"{written} (set in a block that may not run, line{'s' * (len(lines) > 1)}"
        f" {', '.join(map(str, lines))})"
    )


def _set_in_a_block(origins: list[tuple[str, int]]) -> str:
    """Where the variables of `origins` are set in a block that may not run, in words."""
    lines: dict[str, list[str]] = {}
    for name, line in origins[: shell_variables.ORIGINS_KEPT]:
        lines.setdefault(name, []).append(str(line))
    shown = ", ".join(
        f"${name} (line{'s' * (len(numbers) > 1)} {', '.join(numbers)})"
        for name, numbers in lines.items()
    ) + (" and more" if len(origins) > shell_variables.ORIGINS_KEPT else "")
    return (
        f"{shown} set inside a block (an if/case branch, a loop, a function, or after && or"
        " ||) that may not run, or in a subshell or pipeline, whose settings are not seen"
        " after it"
    )


def flag_opaque(launch: Launch, key: str, value: str, origins: list[tuple[str, str]]) -> None:
    """A key whose value uses a variable that a command may set (`source FILE`, `. FILE`,
    `eval ...`, which run text not read here, or `export $(cat .env)`, whose names are made
    as it runs), as no assignment after that command sets it: the value bash gives is known
    only when the script runs, and the key is to check. A script that sources `~/.bashrc`
    before setting every variable its verl command uses converts as before."""
    if not origins:
        return
    names = ", ".join(f"${name}" for name, _command in origins)
    launch.notes.append(
        f"{key}={value}: {names} may be set by {origins[0][1]}, which may set or unset any"
        f" variable, and no assignment after it surely sets {'them' if len(origins) > 1 else 'it'}"
        ": check it"
    )
    launch.incomplete.append(f"{key}={value}")


def flag_recursive(launch: Launch, recursive: list[tuple[str, int]]) -> None:
    """Each key of the config flagged where a function that starts verl calls itself
    (`verl_script_reader._read_call`): bash starts verl again there, with values not read
    here."""
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


def compare_calls(
    script: Script, key: tuple[tuple[int, ...], str], number: int, launch: Launch
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
