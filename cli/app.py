"""Root of the `mfsdp` command: groups `train`, `ckpt`, `data`, and `demo`; `run` runs it
for the entry point (`cli.main`, which handles Ctrl-C and SIGTERM while this is imported)."""

from __future__ import annotations

import difflib
import errno
import os

import click

from cli import stop_signals
from cli.errors import MfsdpGroup
from cli.main import json_asked, options_of
from cli.stop import EXIT_INTERRUPTED, terminated
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
      mfsdp ckpt export-hf runs/demo/sft --out hf/demo    # to Hugging Face safetensors
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


def run() -> None:
    """Run `mfsdp` on sys.argv. A usage mistake (unknown option, missing argument) is one
    line and exit 2, like every other error, instead of click's usage block; with --json
    among the arguments it is a JSON object on stdout too (`cli.errors.fail`), since the
    command may have failed before parsing its own --json."""
    import sys

    from cli.std_streams import ensure_standard_streams

    ensure_standard_streams()  # before anything opens a file or writes a line
    from cli.errors import fail, stdout_failure
    from cli.lines import say
    from cli.option_spellings import other_spelling, value_without_option
    from trainer.threads import drop_malformed_thread_count

    args = _home_in_option_values(sys.argv[1:])
    options = options_of(args)
    as_json = json_asked(args)
    lost = _lost_working_dir()
    if lost:
        fail(lost, 2, as_json)
    dropped = drop_malformed_thread_count()  # before any command loads torch (and OpenMP)
    if dropped:
        say(f"note: {dropped}", err=True)
    try:
        app.main(args=args, prog_name="mfsdp", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as err:  # `mfsdp ckpt` alone: its help
        click.echo(err.format_message(), err=True)
        sys.exit(2)
    except click.UsageError as err:
        where = f"; see '{_command_path(err, args)} --help'"
        told = (
            _misplaced_option(err, options)
            or _misplaced_command(err)
            or _dashed_override(err)
            or _flag_of_another_trainer(err, options)
            or other_spelling(err)
            or value_without_option(err, options)
        )
        fail(f"{told or _usage_message(err)}{where}", 2, as_json)
    except click.ClickException as err:
        fail(err.format_message(), err.exit_code, as_json)
    except click.Abort:  # a signal before the command started, where click caught it
        if terminated.is_set():
            fail(stop_signals.said("aborted"), stop_signals.exit_code(), as_json)
        fail("aborted", EXIT_INTERRUPTED, as_json)
    except OSError as err:  # printing help or the version (commands report their own)
        written = stdout_failure(err)
        if written is None:
            raise
        fail(written, 1, False)


def _lost_working_dir() -> str | None:
    """Why the working directory cannot be used (it was deleted while a shell was in it), or
    None. Every relative path would then fail with errno's "No such file or directory" and
    no name, and torch's MKL aborts the process on import ("Cannot load libtorch_cpu.so"),
    so the command stops before any of that, naming the directory."""
    try:
        os.getcwd()
    except OSError as err:
        try:  # the kernel still knows the deleted directory's path
            where = os.readlink("/proc/self/cwd").removesuffix(" (deleted)")
        except OSError:
            where = "."
        what = "was deleted" if err.errno == errno.ENOENT else f"cannot be used ({err.strerror})"
        return f"{where}: the working directory {what}; cd to an existing directory"
    return None


def _home_in_option_values(args: list[str]) -> list[str]:
    """`args` with a leading `~` of an `--option=~/...` value expanded. A shell expands
    `--out ~/hf` but not `--out=~/hf` (no assignment to it), which then made a directory
    named `~` in the current one; `~` in a config's path keys is expanded too
    (trainer.config.ExpandUser). Arguments after `--` are left as typed."""
    expanded: list[str] = []
    for index, arg in enumerate(args):
        if arg == "--":
            return expanded + args[index:]
        name, sep, value = arg.partition("=")
        if arg.startswith("--") and sep and value.startswith("~"):
            arg = f"{name}={os.path.expanduser(value)}"
        expanded.append(arg)
    return expanded


def _usage_message(err: click.UsageError) -> str:
    """click's message, with only the closest of its suggestions for a mistyped option or
    command (click lists every close one alphabetically: `--outt` got '--io', '--layout',
    '--out')."""
    name = getattr(err, "option_name", None) or getattr(err, "command_name", None)
    if name:
        guess = _closest_guess(name, getattr(err, "possibilities", None) or [])
        told = err.message.rstrip(".")
        return f"{told} (did you mean {guess!r}?)" if guess else told
    return _choices_on_one_line(err, err.format_message()).rstrip(".")


def _closest_guess(given: str, guesses: list[str]) -> str | None:
    """The one of click's `guesses` for the mistyped `given` closest in its letters, if close:
    click compares the names with their dashes, which made `--lr` close to '--help' (its
    only guess, 4 of the 10 characters alike being dashes)."""

    def likeness(guess: str) -> float:
        return difflib.SequenceMatcher(None, given.lstrip("-"), guess.lstrip("-")).ratio()

    best = max(guesses, key=likeness, default=None)
    return best if best is not None and likeness(best) >= GUESS_LIKENESS else None


GUESS_LIKENESS = 0.7  # `--outt`: '--out' (0.86); `--lr`: not '--role' (0.67) nor '--help'


def _choices_on_one_line(err: click.UsageError, message: str) -> str:
    """`message` with the choices of a missing argument on one line (`Choose from: sft,
    grpo`): click lists them one per line, tab-indented, which the one error line showed as
    `Choose from:\\x0a\\x09sft,\\x0a\\x09grpo`, its escapes for the newlines and tabs of text
    users choose (paths). Only click's own list is rewritten; the rest stays as it is."""
    param = getattr(err, "param", None)
    if not isinstance(err, click.MissingParameter) or param is None:
        return message
    if not isinstance(param.type, click.Choice):
        return message
    listed = param.type.get_missing_message(param=param, ctx=err.ctx)
    choices = ", ".join(str(choice) for choice in param.type.choices)
    return message.replace(listed, f"Choose from: {choices}")


def _misplaced_option(err: click.UsageError, args: list[str]) -> str | None:
    """For an option mfsdp has, given at the wrong level of the command: where it goes.
    Global options (`-v`) belong to `mfsdp` and come before the command; a command's own
    (`--json`, `--deep`) come after its name. click only says there is no such option there,
    or suggests an unrelated close name (`--json` at the root got '--version')."""
    if not isinstance(err, click.NoSuchOption) or err.ctx is None:
        return None
    option, ctx = err.option_name, err.ctx
    here = f"No such option '{option}' for '{ctx.command_path}'"
    owner = ctx.parent
    while owner is not None:
        if _takes(owner.command, option):
            below = ctx.command_path[len(owner.command_path) :].strip()
            return (
                f"{here}: it is an option of '{owner.command_path}', given before the command "
                f"({owner.command_path} {option} {below} ...)"
            )
        owner = owner.parent
    named = _named_command(ctx.command, args)
    taking = [words for words in _commands_below(ctx.command) if _takes(words[-1], option)]
    if not taking:
        return None
    words = next((words for words in taking if words == named), taking[0])
    path = " ".join(command.name or "" for command in words)
    return f"{here}: give it after the command name ({ctx.command_path} {path} ... {option})"


def _misplaced_command(err: click.UsageError) -> str | None:
    """For a command name mfsdp has at another level (`mfsdp export-hf`, `mfsdp sft`), or an
    option given as a command (`mfsdp version`): the full command. Otherwise, where click has
    no close name to offer (`mfsdp train ppo`), the commands there, instead of a bare "no such
    command" that sends the user to --help."""
    if not isinstance(err, click.exceptions.NoSuchCommand) or err.ctx is None:
        return None
    name, ctx = err.command_name, err.ctx
    here = f"No such command '{name}' for '{ctx.command_path}'"
    root = ctx.find_root()
    below = {  # every command's words below the root, groups too: ("ckpt", "export-hf")
        tuple(command.name or "" for command in chain[:depth])
        for chain in _commands_below(root.command)
        for depth in range(1, len(chain) + 1)
    }
    close = sorted(" ".join([root.command_path, *words]) for words in below if words[-1] == name)
    if close:
        return f"{here} (did you mean '{close[0]}'?)"
    if _takes(ctx.command, f"--{name}"):
        return f"{here} (did you mean '{ctx.command_path} --{name}'?)"
    if _closest_guess(name, err.possibilities or []) or not isinstance(ctx.command, click.Group):
        return None
    return f"{here}; its commands: {', '.join(sorted(ctx.command.commands))}"


def _dashed_override(err: click.UsageError) -> str | None:
    """For `--trainer.total_steps=2` (argparse and torchtitan spell config keys as options):
    mfsdp's overrides are bare `key=value` words."""
    if not isinstance(err, click.NoSuchOption) or "." not in err.option_name:
        return None
    path = err.ctx.command_path if err.ctx is not None else "mfsdp"
    key = err.option_name.lstrip("-")
    return (
        f"No such option '{err.option_name}' for '{path}': config overrides are written "
        f"without dashes, as {key}=VALUE"
    )


def _flag_of_another_trainer(err: click.UsageError, args: list[str]) -> str | None:
    """For a Megatron-LM flag given to `mfsdp train sft|grpo` (`--lr 1e-3`, `--save DIR`):
    the config key of the same meaning, with the value given (`cli.megatron_flags`)."""
    from cli.megatron_flags import flag_meant, takes_value

    if not isinstance(err, click.NoSuchOption) or err.ctx is None:
        return None
    parent = err.ctx.parent
    if parent is None or parent.info_name != "train":
        return None
    flag, command = err.option_name, err.ctx.info_name or ""
    value = _value_of(flag, args) if takes_value(flag, command) else None
    meant = flag_meant(flag, value, command)
    if meant is None:
        return None
    return f"No such option '{flag}' for '{err.ctx.command_path}': {meant}"


def _value_of(flag: str, args: list[str]) -> str | None:
    """The value given with `flag` among `args` (`--lr=1e-3`, or `--lr 1e-3`), or None."""
    for index, arg in enumerate(args):
        name, sep, value = arg.partition("=")
        if name == flag and sep:
            return value
        if arg == flag and index + 1 < len(args) and not args[index + 1].startswith("-"):
            return args[index + 1]
    return None


def _command_path(err: click.UsageError, args: list[str]) -> str:
    """The command a usage error is about: its context's, or where click gives it none (an
    option given without its value: click's parser raises that without one, and the line
    went without its `see ... --help`) the command the words in `args` name."""
    if err.ctx is not None:
        return err.ctx.command_path
    return " ".join(["mfsdp", *(command.name or "" for command in _named_command(app, args))])


def _named_command(group: click.Command, args: list[str]) -> list[click.Command]:
    """The commands below `group` that the words in `args` name (`ckpt`, `validate`)."""
    named: list[click.Command] = []
    command = group
    for arg in args:
        if not isinstance(command, click.Group):
            break
        if arg in command.commands:
            command = command.commands[arg]
            named.append(command)
    return named


def _commands_below(group: click.Command) -> list[list[click.Command]]:
    """Every runnable command below `group`, as the chain of commands leading to it."""
    if not isinstance(group, click.Group):
        return []
    return [
        [sub, *chain] for sub in group.commands.values() for chain in (_commands_below(sub) or [[]])
    ]


def _takes(command: click.Command, option: str) -> bool:
    return any(option in param.opts + param.secondary_opts for param in command.params)
