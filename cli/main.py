"""Root of the `mfsdp` command: groups `train`, `ckpt`, `data`, and `demo`."""

from __future__ import annotations

import click

from cli.errors import MfsdpGroup
from mfsdp_ckpt import __version__


@click.group(
    cls=MfsdpGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, prog_name="mfsdp")
@click.option(
    "-v",
    "--verbose",
    count=True,
    help="Log what the library does (-v: checkpoint save/load timings; -vv: more).",
)
def app(verbose: int) -> None:
    """Train LLMs with Megatron-FSDP and work with their DTensor checkpoints.

    \b
    Examples:
      mfsdp demo                                  # tiny end-to-end run on CPU
      mfsdp ckpt validate runs/demo/sft --deep    # is this checkpoint intact?
      mfsdp ckpt export-hf runs/demo/sft --out hf/    # to Hugging Face safetensors
      mfsdp -v train sft --config examples/sft_tiny_cpu.yaml    # with save/load timings
    """
    from cli.verbosity import set_verbosity

    set_verbosity(verbose)


def _register() -> None:
    """Command groups live one per module; importing them here keeps `mfsdp --help` complete."""
    from cli import ckpt, config, data, demo, train

    for command in (ckpt.ckpt, demo.demo, train.train, data.data, config.config):
        app.add_command(command)


_register()


def main() -> None:
    """The `mfsdp` entry point. A usage mistake (unknown option, missing argument) is one
    line and exit 2, like every other error, instead of click's usage block; with --json
    among the arguments it is a JSON object on stdout too (`cli.errors.fail`), since the
    command may have failed before parsing its own --json."""
    import sys

    from cli.errors import fail
    from trainer.threads import drop_malformed_thread_count

    dropped = drop_malformed_thread_count()  # before any command loads torch (and OpenMP)
    if dropped:
        click.echo(f"note: {dropped}", err=True)
    args = sys.argv[1:]
    as_json = "--json" in args[: args.index("--")] if "--" in args else "--json" in args
    try:
        app.main(prog_name="mfsdp", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as err:  # `mfsdp ckpt` alone: its help
        click.echo(err.format_message(), err=True)
        sys.exit(2)
    except click.UsageError as err:
        where = f"; see '{err.ctx.command_path} --help'" if err.ctx is not None else ""
        fail(f"{_usage_message(err)}{where}", 2, as_json)
    except click.ClickException as err:
        fail(err.format_message(), err.exit_code, as_json)
    except click.Abort:
        fail("aborted", 130, as_json)


def _usage_message(err: click.UsageError) -> str:
    """click's message, with only the closest of its suggestions for a mistyped option or
    command (click lists every close one alphabetically: `--outt` got '--io', '--layout',
    '--out')."""
    name = getattr(err, "option_name", None) or getattr(err, "command_name", None)
    closest = getattr(err, "possibilities", None)
    if name and closest:
        return f"{err.message.rstrip('.')} (did you mean {closest[0]!r}?)"
    return err.format_message().rstrip(".")
