"""An option that takes one value, given twice, is a usage error: click kept the last value
silently.

`export-hf --out hf/r1 --out hf/r2` wrote hf/r2 alone, `validate --hf-config A --hf-config
B` checked against B (a wrong config scrambles q/k/v on export), `--nproc-per-node 2
--nproc-per-node 3` launched 3, while `--config a.yaml --config b.yaml` was refused. Every
command is a `OnceCommand` (each command group makes its commands so), which refuses such a
repeat in --config's words before any option is used. Flags, counted options (`-v`) and
options that take many values (`multiple`) are left as they are.
"""

from __future__ import annotations

from collections import Counter

import click


class OnceCommand(click.Command):
    """A command refusing a single-value option given more than once (the module's rule)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not ctx.resilient_parsing:
            _refuse_repeats(self, ctx, list(args))
        return super().parse_args(ctx, args)


class OnceGroup(click.Group):
    """A command group whose commands are `OnceCommand`s."""

    command_class = OnceCommand


def _refuse_repeats(command: click.Command, ctx: click.Context, args: list[str]) -> None:
    """click's BadParameter for the first single-value option `args` give more than once.
    The arguments are parsed as the command parses them (a mistake in them is the same
    usage error either way), in the order given: click's parser lists each option once per
    time it was given."""
    _opts, _rest, order = command.make_parser(ctx).parse_args(args=list(args))
    options = [param for param in order if isinstance(param, click.Option)]
    counts = Counter(option for option in options if _takes_one_value(option))
    for param, count in counts.items():
        if count > 1:
            given = ", ".join(_values(param, args)) or "?"
            raise click.BadParameter(
                f"given {count} times ({given}); it takes one value: give one",
                ctx=ctx,
                param=param,
            )


def _takes_one_value(option: click.Option) -> bool:
    return not (option.multiple or option.count or option.is_flag)


def _values(option: click.Option, args: list[str]) -> list[str]:
    """The values `args` give `option`, as typed (`--out x` and `--out=x`), for the line
    naming them."""
    names = {*option.opts, *option.secondary_opts}
    values: list[str] = []
    tokens = iter(args)
    for token in tokens:
        if token == "--":
            break
        name, equals, value = token.partition("=")
        if equals and name in names and name.startswith("--"):
            values.append(value)
        elif token in names:
            values.append(next(tokens, ""))
    return values


__all__ = ["OnceCommand", "OnceGroup"]
