"""`mfsdp data gsm8k|math`: official dataset files -> SFT and RL parquet tables."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import click

from cli.errors import GivenPath, json_option
from cli.given_once import OnceGroup
from cli.json_text import json_text
from cli.lines import say
from mfsdp_ckpt.errors import MfsdpUsageError
from mfsdp_ckpt.format.output_inside import inside_checkpoint
from mfsdp_ckpt.storage.out_lock import cannot_create, ctrl_c_deferred, out_lock
from mfsdp_ckpt.storage.writable import require_writable_dir
from trainer.local_paths import DATA_TABLE_DIRS

# What `mfsdp data synthetic` writes under --out (trainer.grpo.synthetic.write_addition_data).
SYNTHETIC_TABLES = ("sft/train.parquet", "rl/train.parquet", "rl/test.parquet")


def _convert(
    dataset: str,
    inputs: tuple[str, ...],
    out_dir: str,
    split: str | None,
    overwrite: bool,
    as_json: bool,
) -> None:
    from cli.missing_path import refuse_missing
    from mfsdp_ckpt.format.hub_id import hub_id_hint
    from trainer.data.math_datasets import DIRECTORY_DATASETS, convert_files, split_inputs

    for given in inputs:
        refuse_missing(given, hint=hub_id_hint(given, "--input ", dataset=True))
    # Every split name, from --split or an input's file name, and every input checked before
    # anything is made: `../x` named a path outside --out
    split_inputs(list(inputs), split, directories=dataset in DIRECTORY_DATASETS)
    with _writing_into(out_dir):
        written = convert_files(dataset, list(inputs), out_dir, split, overwrite=overwrite)
    _echo_written(out_dir, written.values(), as_json)


@contextlib.contextmanager
def _writing_into(out_dir: str) -> Iterator[None]:
    """Claim `out_dir` for one data command: refuse an --out this process cannot write or
    that is (or lies in) a checkpoint, or whose OUT/sft or OUT/rl is one, make its missing
    parents, hold its lock (out_lock.py) and make OUT, OUT/sft and OUT/rl. When the command
    fails, every folder made here that is still empty is removed again, innermost first: a
    failure leaves nothing behind."""
    require_writable_dir("--out", out_dir, beside=True)  # its lock file goes beside it
    require_writable_dir("--out", out_dir)  # its tables go in it
    out = Path(os.path.abspath(out_dir))
    if not out.name:  # its lock file would go beside it: `/` has no beside
        raise MfsdpUsageError(f"--out {out_dir}: the root directory; name a folder for the tables")
    _refuse_checkpoints(out_dir)
    made: list[Path] = []
    try:
        with contextlib.ExitStack() as lock:
            try:
                _make_dirs(reversed(out.parents), made)
                lock.enter_context(out_lock(out_dir))
            except OSError as err:
                raise _not_writable(out_dir, out, err) from None
            _make_dirs([out, *(out / name for name in DATA_TABLE_DIRS)], made)
            yield
    except BaseException:  # the lock is released by now
        for folder in reversed(made):
            with contextlib.suppress(OSError):  # one someone wrote into meanwhile stays
                os.rmdir(folder)
        raise


def _refuse_checkpoints(out_dir: str) -> None:
    """Refuse, before anything is written, an --out whose tables would land in a checkpoint:
    OUT itself, or the OUT/sft and OUT/rl they are written into (`mfsdp demo --out D` makes
    D/sft a training run's dir: tables written there were mixed into the run)."""
    for target in [out_dir, *(os.path.join(out_dir, name) for name in DATA_TABLE_DIRS)]:
        inside = inside_checkpoint(target)
        if inside is not None:
            named = "" if target == out_dir else f"{target} "
            raise MfsdpUsageError(
                f"--out {out_dir}: {named}{inside}; tables written there would be mixed into"
                " it, choose an --out outside it"
            )


def _make_dirs(folders: Iterable[Path], made: list[Path]) -> None:
    """Make each missing folder, outermost first, adding to `made` those this call made
    (one made meanwhile by another command is not ours to remove)."""
    for folder in folders:
        if os.path.isdir(folder):
            continue
        try:
            with ctrl_c_deferred():  # made and listed together, or neither
                os.mkdir(folder)
                made.append(folder)
        except FileExistsError:
            if not os.path.isdir(folder):
                raise MfsdpUsageError(
                    f"{folder}: is a file, not a directory; choose another --out"
                ) from None


def _not_writable(out_dir: str, out: Path, err: OSError) -> Exception:
    """A folder above --out that could not be made, named as the lock's error names one
    (`cannot_create`): the nearest folder that exists."""
    folder = out.parent
    while not os.path.isdir(folder) and folder != folder.parent:
        folder = folder.parent
    return cannot_create("--out", out_dir, folder, err)


def _echo_written(out_dir: str, paths: Iterable[Path], as_json: bool) -> None:
    """Each table written, named by where it lies under OUT (`sft/train`, `rl/test`: the same
    names whichever command wrote it), one per line or, with --json, as one JSON object a
    script reads the paths for `mfsdp train` from."""
    files = {str(Path(path).relative_to(out_dir).with_suffix("")): str(path) for path in paths}
    if as_json:
        click.echo(json_text({"out_dir": out_dir, "files": files}, indent=2))
        return
    for name, path in files.items():
        say(f"{name}: {path}")


@click.group(cls=OnceGroup, short_help="Make training data: GSM8K, MATH or synthetic.")
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
    type=GivenPath(current_dir_ok=False),
    help="Official file (parquet, jsonl, or json: an array of objects or one object); for math,"
    " also a directory of one .json file per problem (MATH/train); repeat for train and test.",
)
_OUT = click.option(
    "--out",
    "out_dir",
    required=True,
    metavar="DIR",
    type=GivenPath(file_okay=False, output=True, current_dir_ok=True),
    help="Writes DIR/sft/<split>.parquet and DIR/rl/<split>.parquet (made if missing; a table"
    " already there stops it, unless --overwrite; not a checkpoint or run dir).",
)
_SPLIT = click.option(
    "--split",
    default=None,
    help="Split name: letters, digits, _, - and . as in the datasets library, no / (default: "
    "the input file's name, which must meet the same rule: train for train.jsonl or the Hub's "
    "train-00000-of-00001.parquet; the Hub's shards of one split, all given, make one table).",
)
_OVERWRITE = click.option(
    "--overwrite",
    is_flag=True,
    help="Replace tables already at the paths this command writes (by default: exit 2 naming"
    " the first). Only those files: nothing else in DIR is touched.",
)
_JSON = json_option(
    "Print the tables written as one JSON object on stdout (a failure as {error, exit_code})."
)


@data.command(short_help="GSM8K files -> SFT and verl RL tables.")
@_INPUT
@_OUT
@_SPLIT
@_OVERWRITE
@_JSON
def gsm8k(
    inputs: tuple[str, ...], out_dir: str, split: str | None, overwrite: bool, as_json: bool
) -> None:
    """GSM8K (`question`, `answer` with a final `#### N`) -> SFT `messages` and verl RL rows.

    \b
    Examples:
      mfsdp data gsm8k --input gsm8k/train.jsonl --input gsm8k/test.jsonl --out data/gsm8k
      mfsdp data gsm8k --input runs/demo/gsm8k_format/train.jsonl --out runs/gsm8k  # the demo's
    """
    _convert("gsm8k", inputs, out_dir, split, overwrite, as_json)


@data.command(short_help="MATH files -> SFT and verl RL tables.")
@_INPUT
@_OUT
@_SPLIT
@_OVERWRITE
@_JSON
def math(
    inputs: tuple[str, ...], out_dir: str, split: str | None, overwrite: bool, as_json: bool
) -> None:
    """MATH (`problem`, `solution` with a final `\\boxed{...}`) -> SFT and verl RL rows.

    An --input may be a directory of one .json file per problem, as the official release is
    laid out (MATH/train/<subject>/<n>.json): read in sorted order as one split, named by
    the directory (train) unless --split names it.

    \b
    Examples:
      mfsdp data math --input MATH/train.parquet --out data/math
      mfsdp data math --input MATH/train --input MATH/test --out data/math
      mfsdp data math --input MATH/train/algebra --split train --out data/algebra
    """
    _convert("math", inputs, out_dir, split, overwrite, as_json)


@data.command(short_help="Addition problems for tiny CPU GRPO runs.")
@click.option(
    "--out",
    "out_dir",
    required=True,
    metavar="DIR",
    type=GivenPath(file_okay=False, output=True, current_dir_ok=True),
    help="Writes DIR/sft/train.parquet and DIR/rl/{train,test}.parquet (made if missing; a table"
    " already there stops it, unless --overwrite; not a checkpoint or run dir).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Order of the problems.")
@click.option(
    "--digits",
    type=click.IntRange(2, 1000),
    default=10,
    show_default=True,
    help="Operands a + b with a, b below this (10: single-digit addition).",
)
@_OVERWRITE
@_JSON
def synthetic(out_dir: str, seed: int, digits: int, overwrite: bool, as_json: bool) -> None:
    """Single-digit addition ("3 + 4 =" -> "#### 7"), scored by the built-in GSM8K rule: a
    task a tiny model learns in CPU minutes (examples/grpo_tiny_cpu.yaml trains on it).
    rl/test.parquet holds a fifth of the problems out of rl/train.parquet (split 'test').

    \b
    Example:
      mfsdp data synthetic --out runs/addition
      mfsdp train grpo --config examples/grpo_tiny_cpu.yaml trainer.total_steps=20
    """
    from trainer.data.files import refuse_replacing
    from trainer.grpo.synthetic import write_addition_data

    with _writing_into(out_dir):
        refuse_replacing([Path(out_dir) / table for table in SYNTHETIC_TABLES], overwrite)
        written = write_addition_data(out_dir, seed=seed, digits=digits)
    _echo_written(out_dir, written.values(), as_json)
