"""torchrun's options on a verl launch script's command (`torchrun --standalone
--nproc-per-node=8 -m verl.trainer.sft_trainer ...`), expanded as its `key=value` words are:
arrays spread, unquoted expansions split (`torchrun $DIST_ARGS -m ...`), variables as they
stand there. They say how many processes verl ran on, which the conversion gives as
`mfsdp train`'s own flags (`trainer.verl_launch_flags`): left out, the converted run
trained on one GPU of eight without a word. A value from a variable set in a block that may
not run, or by a command that may set any, is flagged as a key's is. A module of its own:
torchrun's command line is apart from verl's overrides (`trainer.verl_script_launch`).
"""

from __future__ import annotations

import dataclasses

from trainer import shell_quoting, shell_variables
from trainer.torchrun_options import Torchrun, launcher_start, read_options
from trainer.verl_script_flags import flag_maybe, flag_opaque
from trainer.verl_script_state import Launch


def read_torchrun(
    words: list[str], variables: shell_variables.Variables, launch: Launch
) -> Torchrun | None:
    """torchrun's options among `words` (the command's words before verl's module), None
    where the command starts no torchrun. Notes made while expanding go to the launch's."""
    start = launcher_start(words)
    if start is None:
        return None
    before = len(variables.notes)
    expanded: list[tuple[str, str]] = []
    for written in words[start:]:
        for word in variables.spread([written], launch.notes):
            fields = variables.fields(word)
            for field in fields if fields is not None else [word]:
                expanded.append((variables.substitute(field), written))
    torchrun = read_options(expanded)
    torchrun.options = [
        dataclasses.replace(
            option,
            shown=shell_quoting.literal(option.shown),
            value=shell_quoting.literal(option.value),
        )
        for option in torchrun.options
    ]
    for option in torchrun.options:
        key = "torchrun " + option.shown.partition("=")[0].partition(" ")[0]
        flag_maybe(launch, key, option.value, variables.origins(option.written))
        flag_opaque(launch, key, option.value, variables.opaque_origins(option.written))
    used = [option.written for option in torchrun.options] + list(torchrun.unread or ())[:1]
    for note in (note for word in used for note in variables.unknowable_notes(word)):
        launch.notes += [note] if note not in launch.notes else []
    launch.notes += variables.notes[before:]
    del variables.notes[before:]
    return torchrun
