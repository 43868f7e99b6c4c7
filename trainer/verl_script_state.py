"""What reading a verl launch script keeps (`trainer.verl_script_reader`): the verl trainer
modules a command may start, the command found (`Launch`), what the reading has found so far
(`Script`) and the function and loop bodies it reads again (`Body`). A module of its own so
that the modules reading the script each import it, never each other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from trainer import shell_lines, shell_variables
from trainer.torchrun_options import Torchrun

GRPO_MODULES = ("verl.trainer.main_ppo",)
SFT_MODULES = ("verl.trainer.fsdp_sft_trainer", "verl.trainer.sft_trainer")
VERL_MODULES = frozenset(GRPO_MODULES + SFT_MODULES)
# a verl trainer run as its file (`python3 verl/trainer/main_ppo.py`, `$VERL/verl/trainer/...`):
# its Hydra entry point runs as `-m verl.trainer.main_ppo` does
_MODULE_FILE = re.compile(r"(?:^|/)verl/trainer/([a-z_]+)\.py$")


def verl_module(word: str) -> str | None:
    """The verl trainer module the command word `word` starts, named or as its file; None
    for any other word. Read as modules only, a script that runs the file was refused as
    holding no verl command."""
    found = _MODULE_FILE.search(word)
    module = f"verl.trainer.{found.group(1)}" if found else word
    return module if module in VERL_MODULES else None


@dataclass
class Launch:
    """A verl trainer command of the script, its values expanded as they stand there (a
    variable set again after the command does not reach it)."""

    command: str  # sft | grpo
    module: str  # verl's trainer module (GRPO_MODULES, SFT_MODULES)
    words: list[str]  # its arguments as written
    texts: list[tuple[str, str]] = field(default_factory=list)  # key, value expanded
    hydra: dict[str, str] = field(default_factory=dict)  # its Hydra options, values expanded
    notes: list[str] = field(default_factory=list)
    taken: list[str] = field(default_factory=list)  # environment variables put into paths
    # why one of its values cannot be read (`verl_script_launch._unreadable`)
    refused: str = ""
    incomplete: list[str] = field(default_factory=list)  # keys to check (`flag_maybe`)
    # torchrun's options where the command starts verl through it (`verl_script_torchrun`)
    torchrun: Torchrun | None = None
    line: int = 0  # the script's line the command is on (in a function, in its body)


@dataclass
class Script:
    """What reading a script's commands in order has found so far
    (`verl_script_reader._read_command`)."""

    variables: shell_variables.Variables
    launch: Launch | None = None  # its last verl trainer command
    launches: int = 0
    array: shell_variables.Array | None = None  # a bash array being read, over lines
    array_guarded: bool = False  # that array is set in a block that may not run: not set here
    array_line: int = 0  # the line that array starts on
    blocks: shell_lines.Blocks = field(default_factory=shell_lines.Blocks)
    # the commands read so far, each with its line, in the reading going on (the
    # script's, or a body's read again: `verl_script_reader._read_again`), and the bodies
    # open in it
    read: list[tuple[int, list[str]]] = field(default_factory=list)
    recording: list[Body] = field(default_factory=list)
    functions: dict[str, Body] = field(default_factory=dict)  # each function's body
    starters: dict[str, bool] = field(default_factory=dict)  # whether each starts verl
    # each function that starts verl, called (under the calls being read again, by their
    # lines): the line of its last call and its values there
    calls: dict[tuple[tuple[int, ...], str], tuple[int, list[tuple[str, str]]]] = field(
        default_factory=dict
    )
    calling: list[tuple[str, int]] = field(default_factory=list)  # the calls being read again
    # the calls of a function that starts verl made from its own body (or a function it
    # calls), each with its line: not read again, each another run of verl
    # (`verl_script_reader._read_call`)
    recursive: list[tuple[str, int]] = field(default_factory=list)
    again: int = 0  # commands read again so far (`verl_script_reader.MAX_READ_AGAIN`)
    depth: int = 0  # how many readings again are going on
    quiet: int = 0  # how many of them read a loop's next pass only to compare its values


@dataclass
class Body:
    """A function's or a loop's body: where it starts and ends among the commands of the
    reading it stands in (`Script.read`), to be read again where bash runs it again: a
    function's where it is called, a loop's for its next pass
    (`verl_script_reader._flag_next_pass`)."""

    function: str  # the function whose body it is; "" for a loop's
    read: list[tuple[int, list[str]]]  # the commands of the reading it stands in
    first: int  # its first command there, and the word of it the body starts at
    start: int
    last: int = -1  # its last command (the one that ends it), and the word that ends it
    end: int = 0
    # its command that last started verl (`verl_script_reader._read_command`); -1 if none
    launch_at: int = -1

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
