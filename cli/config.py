"""`mfsdp config`: print a run config's defaults, convert a verl script or config into
one, or check one without training."""

from __future__ import annotations

import click

from cli.choice import Choice
from cli.errors import EXIT_FAILED, GivenPath, fail, json_option
from cli.given_once import OnceGroup
from cli.json_text import json_text
from cli.launch import config_option


@click.group(cls=OnceGroup, short_help="Make, convert or check run configs.")
def config() -> None:
    """Work with run configs (YAML files for `mfsdp train sft|grpo --config`).

    \b
    Examples:
      mfsdp config defaults sft > sft.yaml     # every key with its default
      mfsdp config from-verl examples/verl/run_grpo_megatron_fsdp.sh > grpo.yaml
      mfsdp config from-verl examples/verl/run_sft_megatron_fsdp.sh > sft.yaml
      mfsdp config check grpo --config grpo.yaml    # checked as train checks it
      mfsdp train grpo --config grpo.yaml --nproc-per-node 8
    """


@config.command("defaults", short_help="Print every config key with its default.")
@click.argument("trainer", type=Choice(["sft", "grpo"]), metavar="TRAINER")
def defaults(trainer: str) -> None:
    """Print every config key of `mfsdp train TRAINER` (sft or grpo) with its default, as a
    YAML file that `--config` takes (edit what you need, delete the rest). GRPO's prompt and
    response lengths are printed to fit the default model.shape's context, a comment giving
    their defaults.

    Keys and ranges are those of trainer/config.py and trainer/grpo/config.py; verl's key
    names are accepted too (docs/verl.md).

    \b
    Example:
      mfsdp config defaults grpo > grpo.yaml
    """
    from cli.config_defaults import defaults_text

    click.echo(defaults_text(trainer), nl=False)


@config.command("from-verl", short_help="Convert a verl script or config.")
@click.argument("source", type=GivenPath(dir_okay=False))
@click.option(
    "--command",
    "command",
    type=Choice(["auto", "sft", "grpo"]),
    default="auto",
    show_default=True,
    help="Which trainer the config is for; auto: from verl's module (main_ppo: grpo) "
    "or the keys only one trainer takes, as mfsdp train tells them apart.",
)
def from_verl(source: str, command: str) -> None:
    """Print SOURCE (a shell script that runs `python3 -m verl.trainer.main_ppo key=value ...`
    or verl's SFT trainer, or a verl YAML config) as an mfsdp YAML config on stdout.

    Comments at the top say how each verl key was carried over and which keys were not,
    and why. Exit 0: every key carried over; 1: some were not, or a value still needs
    editing (`$2`, `$HOME` or `$(...)` the script fills in only when it runs), or a config
    file of yours that verl merges in is not in it (the YAML is still printed); 2: SOURCE is
    not a verl script or config (an mfsdp config, every key mfsdp's, goes to `mfsdp train
    sft|grpo --config` as it is). Nothing in the script is executed.

    \b
    Example:
      mfsdp config from-verl examples/verl/run_grpo_megatron_fsdp.sh > grpo.yaml
    """
    from cli.missing_path import refuse_missing
    from trainer.verl_import import convert_verl

    refuse_missing(source)
    conversion = convert_verl(source, None if command == "auto" else command)
    click.echo(conversion.to_yaml(source), nl=False)
    unfinished = []
    if conversion.dropped:
        unfinished.append(f"{len(conversion.dropped)} key(s) not carried over")
    if conversion.incomplete:
        unfinished.append(f"still to edit or add: {'; '.join(conversion.incomplete)}")
    if unfinished:
        # `error:` as every other command's exit-1 line: a script telling failures by it
        fail(f"from-verl: {'; '.join(unfinished)} (listed at the top)", EXIT_FAILED)


@config.command("check", short_help="Check a config as train would, without training.")
@click.argument("trainer", type=Choice(["sft", "grpo"]), metavar="TRAINER")
@config_option("as `mfsdp train TRAINER --config` reads them", "TRAINER")
@json_option("Print the result as one JSON object on stdout (a failure as {error, exit_code}).")
@click.argument("overrides", nargs=-1)
def check(trainer: str, config_path: str | None, as_json: bool, overrides: tuple[str, ...]) -> None:
    """Check the config `mfsdp train TRAINER --config FILE OVERRIDES` would run (TRAINER:
    sft or grpo), as train checks it before it loads anything: key names, types and ranges,
    keys that disagree (GRPO's batch sizes, split as for one rank), verl's keys, the paths
    it names (model, tokenizer, data files, run dir), and each data file's first row as
    train reads its rows. Nothing is written, and torch is not
    imported, except that `model.overrides` are checked as train checks them, against the
    model's transformers config (a key it lacks, a value it refuses): that loads transformers
    and torch, and the tokenizer, but no weights.

    Exit 0 with `ok: FILE is a valid mfsdp TRAINER config`; else the one line `mfsdp train`
    would print for the first problem, with the exit status train would give: 2 for a bad
    config (`optim.lr=-1`: "config key 'optim.lr' must be >= 0, got -1"), 1 for a damaged
    run dir (a file, or a step dir without its manifest, at a step's name). What the
    machine has (GPUs, vLLM or megatron-fsdp installed, a wandb key) is not checked: train
    checks that where it runs.

    \b
    Examples:
      mfsdp config check sft --config examples/sft_tiny_cpu.yaml    # after `mfsdp demo`
      mfsdp config check sft --config examples/sft_tiny_cpu.yaml --json optim.lr=1e-3
    """
    from cli.config_check import check_config, ok_line

    check_config(trainer, config_path, list(overrides))
    if as_json:
        click.echo(json_text({"valid": True, "trainer": trainer, "config": config_path}))
    else:
        click.echo(ok_line(trainer, config_path))
