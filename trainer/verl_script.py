"""Reading a verl launch script, for `mfsdp config from-verl`: the `key=value` arguments of
its (last) `python3 -m verl.trainer.main_ppo` or verl SFT trainer command, its Hydra options
(--config-path / --config-name, config-group selections), and notes on what of them is known
only when the script runs.

Apart from `trainer.verl_import`, which converts the pairs to an mfsdp config, as this reads
bash as bash runs it: the commands in order by `trainer.verl_script_reader` (text into
commands by `trainer.verl_script_lines`, a command's words classed by
`trainer.verl_script_pieces`), the verl command's values by `trainer.verl_script_launch`,
keys to check by `trainer.verl_script_flags`, Hydra's options by `trainer.verl_script_hydra`,
torchrun's before the command by `trainer.verl_script_torchrun`,
with the records they share in `trainer.verl_script_state`; built on `trainer.shell_lines`
and `trainer.shell_quoting` (lines, quotes,
commands), `trainer.shell_variables` (variables expanded where the command stands, arrays
`NAME=( ... )` spread where `"${NAME[@]}"` stands) and `trainer.shell_arithmetic`; what a
script shares with a YAML config (the bounded YAML reader, error and expansion limit, which
keys name a path, how a value and verl's own config files are named in a note) is
`trainer.verl_source`'s.
Nothing in the script is executed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from trainer import shell_variables, verl_hydra_files
from trainer.config_yaml import ExpansionBudget
from trainer.torchrun_options import Torchrun
from trainer.verl_hydra_value import HydraValueError, hydra_override_value
from trainer.verl_script_hydra import (
    config_path_and_name,
    group_selections,
    hydra_config_notes,
    names_hydra_option,
)
from trainer.verl_script_lines import COMMAND_SUBSTITUTION
from trainer.verl_script_reader import read_script
from trainer.verl_source import (
    MAX_EXPANDED_CHARS,
    VerlSourceError,
    parse_bounded,
)


class ScriptReading(NamedTuple):
    """What `script_pairs` reads of a launch script."""

    pairs: list[tuple[str, Any]]
    module: str
    notes: list[str]
    incomplete: list[str]
    refused: list[str]
    to_check: list[str]
    config: str | None
    selected: list[tuple[str, Any]]
    torchrun: Torchrun | None


def script_pairs(text: str, source: Path) -> ScriptReading:
    """The `key=value` arguments of the script's (last) verl trainer command, its module,
    notes on what of the command is known only when the script runs, the config file of
    the user's it names (`hydra_config_notes`), its config-group selections that are
    not carried over (`group_selections`), the keys whose variables it sets in a block
    that may not run (`flag_maybe`), and the trainer config of verl's it loads
    (`verl_hydra_files.loaded_config`; None for one of the user's): the settings verl reads
    before the command's, such as the actor's backend `ppo_megatron_trainer` sets, and its
    config-group selections as (key, option) pairs, which say the backend too
    (`model_engine=megatron`); and torchrun's options where torchrun starts the command
    (`trainer.verl_script_torchrun`), which say how many processes it ran on."""
    try:
        launch, launches, variables = read_script(text, source)
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
    hydra_notes, incomplete = hydra_config_notes(launch.hydra, launch.command)
    pairs = []
    # the values make one config: one budget for them all, as large as the script's
    # variables may make them (each value's aliases count as often as they are used)
    budget = ExpansionBudget(max_chars=MAX_EXPANDED_CHARS)
    for key, text_value in launch.texts:
        if COMMAND_SUBSTITUTION.search(text_value):  # the shell's output, text here
            parsed: Any = text_value
        elif "`" in text_value:  # one bash leaves as it is: verl receives the backtick
            parsed = _hydra_value(text_value, f"{source}: {key}")
        else:
            # `key=` (an unset `$VAR`) is Hydra's empty text, not null: verl gets ''
            parsed = parse_bounded(text_value, f"{source}: {key}", budget)
        pairs.append((key, parsed))
    taken_notes = [
        f"${name}: taken from this environment, as the shell running the script here would"
        for name in launch.taken
    ]  # named, never quoted: the config is a file people share
    config = verl_hydra_files.loaded_config(launch.module, *config_path_and_name(launch.hydra))
    pairs, selected, selection_notes, refused = group_selections(pairs, config)
    # the options naming a config file of the user's are listed once, with that file
    to_check = [item for item in launch.incomplete if not (incomplete and names_hydra_option(item))]
    notes = [*variables.notes, *launch.notes, *taken_notes, *notes, *hydra_notes]
    return ScriptReading(
        pairs,
        launch.module,
        notes + selection_notes,
        incomplete,
        refused,
        to_check,
        config,
        selected,
        launch.torchrun,
    )


def _hydra_value(text: str, where: str) -> Any:
    """A value holding a backtick that is no command substitution (`'a`b'`, quoted for
    bash), read by Hydra's grammar alone, which refuses a backtick outside quotes: the
    reading of values holding shell syntax (`parse_bounded`) took it as text, though verl
    does not start on it."""
    try:
        return hydra_override_value(text)
    except HydraValueError as err:
        raise VerlSourceError(f"{where}: {err}") from None
