"""An mfsdp command line as the user who started this process can type it.

`./dev demo` and `./dev mfsdp` run mfsdp from the project's `.venv`, which is not on PATH until
activated: a line naming the next command as `mfsdp ...` sent such a user to "command not
found". `./dev` sets MFSDP_DEV to itself as its caller ran it (`./dev`, `../mfsdp/dev`), and
commands are then named as `./dev mfsdp ...`. Where its caller chose the venv (MFSDP_VENV),
`./dev` sets MFSDP_DEV_VENV to it and the commands carry it (`MFSDP_VENV=VENV ./dev mfsdp
...`): pasted without it, a line built a second `.venv`, with whatever Python came first.
It lives beside the checkpoint library, not in the CLI, so that every line naming a next
command (a refusal in a reader, the trainer's config checks) names it alike.
"""

from __future__ import annotations

import os
import shlex

DEV_SCRIPT = "MFSDP_DEV"
DEV_VENV = "MFSDP_DEV_VENV"  # the venv `./dev` ran mfsdp from, where MFSDP_VENV chose it
# mfsdp commands `./dev` runs under their own name (`./dev demo ARGS` is `mfsdp demo ARGS`):
# named so, as its usage and the README give them, where the demo was started through it
DEV_COMMANDS = ("demo",)


def mfsdp_command(words: str, *args: str | os.PathLike) -> str:
    """The mfsdp command of `words` (said as typed) and `args` (paths quoted for a shell; a
    str is said as it is), in backquotes: through `./dev` when this process was started by
    it (`./dev demo` for the demo, `./dev mfsdp ...` for the others; after
    `MFSDP_VENV=VENV` where its caller chose the venv so), else `mfsdp` (on PATH once
    `.venv` is activated)."""
    dev = os.environ.get(DEV_SCRIPT)
    command = "mfsdp"
    if dev:
        own_name = words.split(" ", 1)[0] in DEV_COMMANDS
        command = shlex.quote(dev) if own_name else f"{shlex.quote(dev)} mfsdp"
        venv = os.environ.get(DEV_VENV)
        if venv:
            command = f"MFSDP_VENV={shlex.quote(venv)} {command}"
    quoted_args = " ".join(a if isinstance(a, str) else shlex.quote(os.fspath(a)) for a in args)
    return "`" + " ".join(part for part in (command, words, quoted_args) if part) + "`"


__all__ = ["DEV_COMMANDS", "DEV_SCRIPT", "DEV_VENV", "mfsdp_command"]
