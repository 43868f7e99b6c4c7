"""`mfsdp data gsm8k|math`: official dataset files -> SFT and RL parquet tables."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import click

from cli.errors import remember_json
from cli.lines import say
from mfsdp_ckpt.storage.out_lock import out_lock
from mfsdp_ckpt.storage.writable import require_writable_dir


def _convert(
    dataset: str, inputs: tuple[str, ...], out_dir: str, split: str | None, as_json: bool
) -> None:
    from trainer.data.math_datasets import convert_files

    require_writable_dir("--out", out_dir)
    with out_lock(out_dir):
        written = convert_files(dataset, list(inputs), out_dir, split)
    _echo_written(out_dir, written.values(), as_json)


def _echo_written(out_dir: str, paths: Iterable[Path], as_json: bool) -> None:
    """Each table written, named by where it lies under OUT (`sft/train`, `rl/test`: the same
    names whichever command wrote it), one per line or, with --json, as one JSON object a
    script reads the paths for `mfsdp train` from."""
    files = {str(Path(path).relative_to(out_dir).with_suffix("")): str(path) for path in paths}
    if as_json:
        click.echo(json.dumps({"out_dir": out_dir, "files": files}, indent=2))
        return
    for name, path in files.items():
        say(f"{name}: {path}")


@click.group()
def data() -> None:
    """Prepare training data: official GSM8K / MATH files, or a synthetic task, to the SFT
    (`messages`) and verl RL (`prompt`, `reward_model`, ...) parquet tables the trainers read.

    \b
    Examples:
      mfsdp data gsm8k --input gsm8k/train.jsonl --input gsm8k/test.jsonl --out data/gsm8k
      mfsdp data math --input MATH/train.parquet --out data/math
      mfsdp data synthetic --out runs/addition     # a task a tiny model learns on CPU
    """


_INPUT = click.option(
    "--input",
    "inputs",
    multiple=True,
    required=True,
    type=click.Path(),
    help="Official file (parquet, jsonl, or json: an array of objects); repeat for train and test.",
)
_OUT = click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Writes OUT/sft/<split>.parquet and OUT/rl/<split>.parquet.",
)
_SPLIT = click.option(
    "--split",
    default=None,
    help="Split name (default: the input file's name, train for train.jsonl or the Hub's "
    "train-00000-of-00001.parquet; the Hub's shards of one split, all given, make one table).",
)
_JSON = click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the tables written as one JSON object (for scripts).",
    callback=remember_json,
)


@data.command()
@_INPUT
@_OUT
@_SPLIT
@_JSON
def gsm8k(inputs: tuple[str, ...], out_dir: str, split: str | None, as_json: bool) -> None:
    """GSM8K (`question`, `answer` with a final `#### N`) -> SFT `messages` and verl RL rows.

    \b
    Examples:
      mfsdp data gsm8k --input gsm8k/train.jsonl --input gsm8k/test.jsonl --out data/gsm8k
      mfsdp data gsm8k --input runs/demo/gsm8k_format/train.jsonl --out runs/gsm8k  # the demo's
    """
    _convert("gsm8k", inputs, out_dir, split, as_json)


@data.command()
@_INPUT
@_OUT
@_SPLIT
@_JSON
def math(inputs: tuple[str, ...], out_dir: str, split: str | None, as_json: bool) -> None:
    """MATH (`problem`, `solution` with a final `\\boxed{...}`) -> SFT and verl RL rows.

    \b
    Example:
      mfsdp data math --input MATH/train.parquet --out data/math
    """
    _convert("math", inputs, out_dir, split, as_json)


@data.command()
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Writes OUT/sft/train.parquet and OUT/rl/{train,test}.parquet.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Order of the problems.")
@click.option(
    "--digits",
    type=click.IntRange(1, 1000),
    default=10,
    show_default=True,
    help="Operands a + b with a, b below this.",
)
@_JSON
def synthetic(out_dir: str, seed: int, digits: int, as_json: bool) -> None:
    """Single-digit addition ("3 + 4 =" -> "#### 7"), scored by the built-in GSM8K rule: a
    task a tiny model learns in CPU minutes (examples/grpo_tiny_cpu.yaml trains on it).

    \b
    Example:
      mfsdp data synthetic --out runs/addition
      mfsdp train grpo --config examples/grpo_tiny_cpu.yaml
    """
    from trainer.grpo.synthetic import write_addition_data

    require_writable_dir("--out", out_dir)
    with out_lock(out_dir):
        written = write_addition_data(out_dir, seed=seed, digits=digits)
    _echo_written(out_dir, written.values(), as_json)
