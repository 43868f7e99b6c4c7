"""The Hydra options of a verl launch script's command: --config-path / --config-name (and
short forms), expanded as its `key=value` words are, the note on the YAML they load
(verl's own, whose defaults need nothing carried, or the user's, not in the conversion),
and its config-group selections (`optim=fsdp`), kept out of the pairs and checked against
the file verl's trainer config selects (`trainer.verl_hydra_files`). A module of its own:
what Hydra makes of these options is apart from how bash reads the script.
"""

from __future__ import annotations

from typing import Any

from trainer import shell_quoting, shell_variables, verl_hydra_files
from trainer.verl_script_flags import flag_maybe, flag_opaque
from trainer.verl_script_state import Launch
from trainer.verl_source import verl_defaults_words, yaml_shown

# Hydra's options that name the YAML a verl command starts from (`--config-path=DIR`,
# `--config-name NAME`): its keys are not on the command line
_HYDRA_CONFIG_OPTIONS = ("--config-path", "--config-name", "-cp", "-cn")


def expanded_hydra_options(
    words: list[str], variables: shell_variables.Variables, launch: Launch
) -> dict[str, str]:
    """The command's Hydra options (`_hydra_options`, of its words with arrays spread), each
    value expanded by the variables as the `key=value` words are: `--config-name=$CFG` with
    `CFG=ppo_megatron_trainer` loads verl's Megatron trainer config (read as a config of the
    user's named `$CFG`, its backend was not told). A value from a variable set in a block
    that may not run, or by a command that may set any, is flagged as a key's is."""
    given = _hydra_options(words)
    for option, written in given.items():
        value = shell_quoting.literal(variables.substitute(written))
        flag_maybe(launch, option, value, variables.origins(written))
        flag_opaque(launch, option, value, variables.opaque_origins(written))
        given[option] = value
    return given


def hydra_config_notes(given: dict[str, str], command: str) -> tuple[list[str], list[str]]:
    """A note on the YAML the command loads with Hydra's --config-path / --config-name
    (`given`, expanded: `expanded_hydra_options`) and, for a file of the user's, those
    options again: its settings are not in this conversion (they were left out without a
    word, then named at exit 0). verl's own configs hold verl's defaults
    (`verl_hydra_files`), which need nothing carried."""
    if not given:
        return [], []
    path, name = config_path_and_name(given)
    shown = ", ".join(f"{option} {value}".strip() for option, value in given.items())
    if verl_hydra_files.is_verl_config(path, name):
        return [f"{shown}: {verl_defaults_words(command)}"], []
    return [
        f"{shown}: verl loads its settings from that YAML first; they are not in"
        " this config: convert it with `mfsdp config from-verl FILE.yaml` and merge the two"
    ], [shown]


def names_hydra_option(item: str) -> bool:
    """Whether `item` (a key to check, `--config-name=$CFG`) is one of the Hydra options:
    for a config file of the user's they are listed already (`hydra_config_notes`)."""
    return item.partition("=")[0] in _HYDRA_CONFIG_OPTIONS


def _hydra_options(words: list[str]) -> dict[str, str]:
    """The command's Hydra --config-path / --config-name options (and short forms), given
    as `--option=value` or `--option value`."""
    given: dict[str, str] = {}
    for index, word in enumerate(words):
        option, sep, value = word.partition("=")
        if option in _HYDRA_CONFIG_OPTIONS:
            given[option] = value if sep else (words[index + 1] if index + 1 < len(words) else "")
    return given


def config_path_and_name(given: dict[str, str]) -> tuple[str | None, str | None]:
    return given.get("--config-path", given.get("-cp")), given.get(
        "--config-name", given.get("-cn")
    )


def group_selections(
    pairs: list[tuple[str, Any]], config: str | None
) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]], list[str], list[str]]:
    """`pairs` less the Hydra config-group selections (`optim=fsdp`), those selections as
    (key, option) pairs (the run's backend is read off them: `model_engine=megatron` trains
    with Megatron's Adam betas), notes naming those that select the file verl's trainer
    config (`config`, the command loads) already selects (they change nothing) or verl's
    Megatron backend where its defaults train as verl's do here
    (`verl_hydra_files.is_backend_choice`), and "key=option: why" for each other selection:
    a run under another file's defaults (a critic) is not the run this conversion describes."""
    selected = [(key, option) for key, option in pairs if verl_hydra_files.selected_group(key)]
    kept = [(key, option) for key, option in pairs if not verl_hydra_files.selected_group(key)]
    same, backend, refused = [], [], []
    for key, option in selected:
        why = verl_hydra_files.unlike_verl_selection(key, option, config)
        shown = f"{key}={yaml_shown(option)}"
        if why is None:
            same.append(shown)
        elif verl_hydra_files.is_backend_choice(key, option, config, selected):
            backend.append(shown)
        else:
            refused.append(f"{shown}: {why}")
    notes = [f"{', '.join(same)}: the file verl's {config} config selects anyway"] if same else []
    if backend:
        notes.append(f"{', '.join(backend)}: {verl_hydra_files.BACKEND_CHOICE}")
    return kept, selected, notes, refused
