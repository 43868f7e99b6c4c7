"""An option spelled as another mfsdp command (or a common tool) spells it, and a value given
without its option: which option of this command was meant.

`mfsdp demo --nproc N` and `mfsdp train --nproc-per-node N` name one setting two ways, so a
user of one typed the other's spelling and got click's bare "No such option"; `--output` and
`-o` (most tools' spelling) got no guess at `--out`, nor `--force` and `-f` at `--overwrite`;
and `export-hf CKPT hf/out`, `--out` forgotten, got "Missing option '--out'" with the path it
was given left unmentioned.
`cli.app` turns these into the usage error's one line.
"""

from __future__ import annotations

import click

# Spellings of one option: each maps to the names it may be meant as, the first that the
# command takes being the guess.
_SAME_OPTION: dict[str, tuple[str, ...]] = {
    "--nproc": ("--nproc-per-node",),
    "--nproc-per-node": ("--nproc",),
    "--output": ("--out",),
    "--output-dir": ("--out",),
    "-o": ("--out",),
    "--force": ("--overwrite",),
    "-f": ("--overwrite",),
}


def other_spelling(err: click.UsageError) -> str | None:
    """For an unknown option whose meaning this command takes under another name (`--nproc`
    for train's `--nproc-per-node`): that name, and which command spells it as given."""
    if not isinstance(err, click.NoSuchOption) or err.ctx is None:
        return None
    given, ctx = err.option_name, err.ctx
    meant = next((name for name in _SAME_OPTION.get(given, ()) if _takes(ctx.command, name)), None)
    if meant is None:
        return None
    spelled = _commands_taking(ctx.find_root(), given)
    names = " and ".join(f"'{path}'" for path in spelled)
    whose = f": {given} is how {names} spell{'s' if len(spelled) == 1 else ''} it" if names else ""
    return f"No such option '{given}' for '{ctx.command_path}' (did you mean '{meant}'?){whose}"


def value_without_option(err: click.UsageError, args: list[str]) -> str | None:
    """For a missing required option given as a bare word after the command's arguments
    (`export-hf runs/sft hf/out`): the option with that word (`--out hf/out`)."""
    if not isinstance(err, click.MissingParameter) or err.ctx is None:
        return None
    param, ctx = err.param, err.ctx
    if not isinstance(param, click.Option) or param.is_flag or not param.opts:
        return None
    extra = _extra_words(ctx, args)
    if len(extra) != 1:
        return None
    option = max(param.opts, key=len)
    return (
        f"Missing option '{option}' for '{ctx.command_path}': '{extra[0]}' was given as one"
        f" more argument (did you mean {option} {extra[0]}?)"
    )


def _extra_words(ctx: click.Context, args: list[str]) -> list[str]:
    """The words given to `ctx`'s command beyond what its arguments take, as click's parser
    reads them (option values are not among them)."""
    words = list(args)
    for name in ctx.command_path.split()[1:]:  # the words naming the command, after `mfsdp`
        if name not in words:
            return []
        words = words[words.index(name) + 1 :]
    parser = ctx.command.make_parser(click.Context(ctx.command, info_name=ctx.info_name))
    try:
        _values, leftover, _order = parser.parse_args(words)
    except click.UsageError:
        return []
    return leftover


def _commands_taking(root: click.Context, option: str) -> list[str]:
    """The full names of the commands below `root` that take `option` (`mfsdp demo`)."""
    found: list[str] = []

    def visit(command: click.Command, path: str) -> None:
        if isinstance(command, click.Group):
            for name, sub in sorted(command.commands.items()):
                visit(sub, f"{path} {name}")
        elif _takes(command, option):
            found.append(path)

    visit(root.command, root.command_path)
    return found


def _takes(command: click.Command, option: str) -> bool:
    return any(option in param.opts + param.secondary_opts for param in command.params)
