"""Convert the official GSM8K and MATH files into SFT (`messages`) and RL (verl columns) tables.

RL rows follow verl's preprocessing so its reward functions and ours read them the same
way: `data_source`, `prompt` (chat turns), `ability`, `reward_model` {style: "rule",
ground_truth}, `extra_info` {split, index, question, answer}. SFT rows carry the same user
prompt and the reference solution as the assistant turn.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from mfsdp_ckpt.check.printable import cut_to
from trainer.data.files import (
    BATCH_ROWS,
    DATA_SUFFIXES,
    DataFileError,
    StagedTables,
    check_data_file,
    iter_file_rows,
    refuse_replacing,
    row_in_table,
    staged_tables,
)
from trainer.data.ground_truths import gsm8k_ground_truth, math_ground_truth
from trainer.data.problem_dirs import directory_route, problem_files, refuse_numbered_problems
from trainer.data.table_kinds import table_kind_hint
from trainer.tiny import GSM8K_SUFFIX

GSM8K_SOURCE = "openai/gsm8k"
MATH_SOURCE = "DigitalLearningGmbH/MATH-lighteval"
MATH_SUFFIX = "Let's think step by step and output the final answer within \\boxed{}."


def _row_index(index: int) -> str:
    """Row `index` (0-based) as an error names it: counted from 1, as `row_in_table` does."""
    return f"row {index + 1}"


# SFT and RL rows of one input row (its split, its index in the split), or ValueError
# saying what is wrong with it, which the caller prefixes with where the row is.
RowConverter = Callable[[dict[str, Any], str, int], tuple[dict, dict]]


def _gsm8k_pair(row: dict[str, Any], split: str, index: int) -> tuple[dict, dict]:
    question, answer = _require(row, "gsm8k", "question", "answer")
    prompt = f"{question} {GSM8K_SUFFIX}"
    truth = gsm8k_ground_truth(answer)
    return (
        _sft_row(prompt, answer, split, index),
        _rl_row(GSM8K_SOURCE, prompt, truth, split, index, question, answer),
    )


def _math_pair(row: dict[str, Any], split: str, index: int) -> tuple[dict, dict]:
    problem, solution = _require(row, "math", "problem", "solution")
    truth = math_ground_truth(solution)
    prompt = f"{problem} {MATH_SUFFIX}"
    return (
        _sft_row(prompt, solution, split, index),
        _rl_row(MATH_SOURCE, prompt, truth, split, index, problem, solution),
    )


CONVERTERS: dict[str, RowConverter] = {"gsm8k": _gsm8k_pair, "math": _math_pair}
# the datasets whose official release is a directory of one-problem files (`problem_dirs`)
DIRECTORY_DATASETS = frozenset({"math"})


def gsm8k_rows(
    rows: list[dict[str, Any]], split: str, where: Callable[[int], str] = _row_index
) -> tuple[list[dict], list[dict]]:
    """SFT and RL rows of GSM8K's `rows`; an error names a row as `where(index)` does (its
    file and line: `RowOrigins`)."""
    return _rows_of(_gsm8k_pair, rows, split, where)


def math_rows(
    rows: list[dict[str, Any]], split: str, where: Callable[[int], str] = _row_index
) -> tuple[list[dict], list[dict]]:
    """SFT and RL rows of MATH's `rows`; an error names a row as `where(index)` does."""
    return _rows_of(_math_pair, rows, split, where)


def _rows_of(
    convert: RowConverter, rows: list[dict[str, Any]], split: str, where: Callable[[int], str]
) -> tuple[list[dict], list[dict]]:
    sft, rl = [], []
    for index, row in enumerate(rows):
        try:
            pair = convert(row, split, index)
        except ValueError as err:
            raise DataFileError(f"{where(index)}: {err}") from None
        sft.append(pair[0])
        rl.append(pair[1])
    return sft, rl


# The shard suffix of the files the Hugging Face Hub serves a dataset in
# (openai/gsm8k: main/train-00000-of-00001.parquet; a larger split in several shards), with
# the fingerprint older `datasets.push_to_hub` wrote after it
# (`{split}-{index:05d}-of-{num_shards:05d}-{fingerprint}.parquet`, a hex digest)
_HUB_SHARD = re.compile(r"(?P<split>.+)-(?P<index>[0-9]{5})-of-(?P<count>[0-9]{5})(?:-[0-9a-f]+)?")
# The words the datasets library reads as a split in a file name (its SPLIT_KEYWORDS): the
# last dot-separated part of `gsm8k.train.jsonl` and `gsm8k.test.jsonl` names their splits
_SPLIT_WORDS = frozenset(
    ("train", "training")
    + ("validation", "valid", "dev", "val")
    + ("test", "testing", "eval", "evaluation")
)


# A split names the files OUT/sft/<split>.parquet and OUT/rl/<split>.parquet: one plain file
# name, as the datasets library's split names are (`train`, `test`, `train.clean`): letters,
# digits, `_` and `-`, in parts joined by single dots. `../x` or `a/b` wrote outside --out
# or into folders of their own; a newline, an escape or a space made names no shell or
# config quotes safely.
_SPLIT_NAME = re.compile(r"[\w-]+(?:\.[\w-]+)*")
_SPLIT_NAME_RULE = "letters, digits, '_', '-' and '.' (not first or last, never '..'), no '/'"
# with its tables' temp names (`.<split>.parquet.<pid>-<16 hex>.tmp`) still within NAME_MAX (255)
_SPLIT_NAME_MAX_BYTES = 200


def _split_name_fault(name: str) -> str | None:
    """Why `name` cannot name OUT/sft/<name>.parquet, or None: the one rule for every split
    name, whether --split gives it or an input's file name does."""
    if not _SPLIT_NAME.fullmatch(name):
        return f"not a split name; use {_SPLIT_NAME_RULE}"
    size = len(name.encode())
    if size > _SPLIT_NAME_MAX_BYTES:
        return f"{size} bytes, longer than a split name may be ({_SPLIT_NAME_MAX_BYTES})"
    return None


def _quoted(name: str) -> str:
    """`name` quoted for an error line (escapes written out, a space seen), its start and end
    (`cut_to`) when longer than a split name may be."""
    return repr(name) if len(name) <= _SPLIT_NAME_MAX_BYTES else cut_to(repr(name), 40)


def check_split_name(split: str | None) -> None:
    """Refuse a `--split` that is not one plain file name (DataFileError, exit 2)."""
    if split is None:
        return
    fault = _split_name_fault(split)
    if fault is not None:
        raise DataFileError(f"--split {_quoted(split)}: {fault}; it names OUT/sft/<split>.parquet")


def _stem(source: str | os.PathLike) -> str:
    """The file's name less its data suffix alone (`gsm8k.train` of gsm8k.train.jsonl): the
    name up to its first dot made gsm8k.train.jsonl and gsm8k.test.jsonl both split `gsm8k`,
    and no file name could give a dotted split (`train.clean`)."""
    name = Path(source).name
    suffix = next((s for s in DATA_SUFFIXES if name.lower().endswith(s)), "")
    return name[: len(name) - len(suffix)]


def _split_word(stem: str) -> str:
    """The last dot-separated part of `stem` where it is a split word after a name (`train`
    of gsm8k.train, as the datasets library reads it), else the whole stem (`train.clean`)."""
    head, _, last = stem.rpartition(".")
    return last if head and last in _SPLIT_WORDS else stem


def split_named_by(source: str | os.PathLike) -> str:
    """The split a file's name says: its stem (`train` of train.jsonl, `train.clean` of
    train.clean.jsonl), without the shard suffix of a file downloaded from the Hub (which
    otherwise named the tables sft/train-00000-of-00001.parquet, where the example configs
    read sft/train.parquet; the Hub's split is kept whole), or the split word that ends it
    (`test` of gsm8k.test.jsonl). DataFileError (exit 2) unless --split would take that
    name: `.jsonl` wrote the hidden sft/.parquet, `tr<newline>ain.jsonl` or `train .jsonl`
    tables --split refuses to name, and a 240-character name failed only after every input
    was read."""
    stem = _stem(source)
    shard = _HUB_SHARD.fullmatch(stem)
    name = shard["split"] if shard else _split_word(stem)
    if not name:
        raise DataFileError(
            f"--input {source}: its file name gives no split name; give --split NAME"
        )
    fault = _split_name_fault(name)
    if fault is not None:
        raise DataFileError(
            f"--input {source}: its file name gives split {_quoted(name)}, {fault};"
            " give --split NAME"
        )
    return name


def convert_files(
    dataset: str,
    inputs: list[str],
    out_dir: str | Path,
    split: str | None = None,
    *,
    overwrite: bool = False,
) -> dict[str, Path]:
    """Convert each input file; the split name is `split` or the one its file name says
    (`split_named_by`), the Hub's shards of one split making one table. A MATH input may be
    a directory of one-problem files (`problem_files`), one split. Every input is
    converted before anything is written, and the tables are written all or none, so a bad
    second input or a full disk leaves --out as it was. A table already at a path written
    is refused before any input is read, unless `overwrite` (then files are replaced,
    never a directory)."""
    splits = split_inputs(inputs, split, directories=dataset in DIRECTORY_DATASETS)
    written = {
        f"{kind}/{name}": Path(out_dir) / kind / f"{name}.parquet"
        for name in splits
        for kind in ("sft", "rl")
    }
    _refuse_writing_over_inputs(inputs, written.values())
    refuse_replacing(list(written.values()), overwrite)
    with staged_tables(replace=overwrite) as staged:
        for name, sources in splits.items():
            tables = (written[f"sft/{name}"], written[f"rl/{name}"])
            _convert_split(CONVERTERS[dataset], name, sources, staged, tables)
    return written


# Rows are converted, then written as one row group of each table, a batch (BATCH_ROWS) at
# a time: memory holds one batch, whatever the size of the input (a million-row file took
# 2.6 KB a row held whole). A batch of long rows ends sooner, at this many characters of
# the rows' texts.
BATCH_TEXT_CHARS = 16 << 20


def _convert_split(
    convert: RowConverter,
    split: str,
    sources: list[str],
    staged: StagedTables,
    tables: tuple[Path, Path],
) -> None:
    """Convert `split`'s input files (its shards, in order) into its SFT and RL tables,
    batch by batch; an error names a row by its file and line, or its place in a file not
    read by line (`RowOrigins`). A bad row is said once its file is read to the end: an
    error reading the file (broken JSON further on) is said first, as it was when a file
    was read whole before its rows were converted. A split's rows count on across its
    shards."""
    index = 0
    batch: list[tuple[dict, dict]] = []
    chars = 0
    for source in _source_files(sources):
        refused: DataFileError | None = None  # its first bad row, said once the file is read
        for local, (row, line) in enumerate(iter_file_rows(source)):  # no rows: EmptyTableError
            if refused is not None:
                continue
            try:
                pair = convert(row, split, index)
            except ValueError as err:
                where = row_in_table(source, local) if line is None else f"{source}:{line}"
                refused = DataFileError(f"{where}: {err}")
                continue
            batch.append(pair)
            index += 1
            chars += sum(map(len, _texts_of(pair)))
            if len(batch) >= BATCH_ROWS or chars >= BATCH_TEXT_CHARS:
                _write_batch(staged, tables, batch)
                batch, chars = [], 0
        if refused is not None:
            raise refused
    if batch:
        _write_batch(staged, tables, batch)


def _source_files(sources: list[str]) -> Iterable[str]:
    """Each input file of `sources`, a directory's problem files (`problem_files`) in turn."""
    for source in sources:
        if os.path.isdir(source):
            yield from map(str, problem_files(source, _SPLIT_WORDS))
        else:
            yield source


def _texts_of(pair: tuple[dict, dict]) -> tuple[str, str]:
    """The input texts a converted row holds (each several times over)."""
    info = pair[1]["extra_info"]
    return info["question"], info["answer"]


def _write_batch(
    staged: StagedTables, tables: tuple[Path, Path], batch: list[tuple[dict, dict]]
) -> None:
    for path, rows in zip(tables, zip(*batch, strict=True), strict=True):
        staged.write(path, rows)


def _refuse_writing_over_inputs(inputs: list[str], outputs: Iterable[Path]) -> None:
    """An input that is one of the tables --out would hold (`--input D/sft/train.parquet
    --out D`) would be replaced by its own conversion: the source data gone."""
    for source in inputs:
        for path in outputs:
            with contextlib.suppress(OSError):  # an output not there yet is no input
                if os.path.samefile(source, path):
                    raise DataFileError(
                        f"{source}: is the table --out would write ({path}); choose another --out"
                    )


def _refuse_repeated_inputs(inputs: list[str]) -> None:
    """One file given twice (`--input X --input X`, or `--input X --input ./X`, or through a
    link): it was refused as two files making one split, converted one at a time each with
    its own --split, which would have converted it twice."""
    first_named: dict[str, str] = {}
    for source in inputs:
        real = os.path.realpath(source)
        first = first_named.get(real)
        if first is None:
            first_named[real] = source
            continue
        named = f"--input {source}" if first == source else f"--input {first} and {source}"
        also = "" if first == source else f" ({real})"
        raise DataFileError(f"{named}: the same file{also} given twice; give it once")


def split_inputs(
    inputs: list[str], split: str | None, *, directories: bool = False
) -> dict[str, list[str]]:
    """{split: its input files}, in the order given, or DataFileError (exit 2) before any
    input is read: a `split` or a split named by an input's file name (`split_named_by`)
    that is not one plain file name, an input given twice, or one that is no data file
    (checked first, so a directory is named as one rather than for its name). Several
    files make one split only as the Hub's shards of it (`train-00000-of-00002.parquet`,
    `train-00001-of-00002.parquet`), read in shard order; and unless `split` names the
    split, every shard must be given: a split converted from some of its shards would
    look whole. With `directories`, an input may be a directory of one-problem files
    (`problem_files`, walked here to refuse one it cannot read): its name gives its split;
    a loose one (`<n>.json`) names none (`refuse_numbered_problems`)."""
    check_split_name(split)
    _refuse_repeated_inputs(inputs)
    grouped: dict[str, list[str]] = {}
    for source in inputs:
        if directories and os.path.isdir(source):
            problem_files(source, _SPLIT_WORDS)
        else:
            check_data_file(source)
        grouped.setdefault(split or split_named_by(source), []).append(source)
    if directories and split is None:
        refuse_numbered_problems(inputs)
    return {
        name: _shards_in_order(name, sources, split, directories)
        for name, sources in grouped.items()
    }


def _shards_in_order(
    name: str, sources: list[str], split: str | None, directories: bool
) -> list[str]:
    matches = [_HUB_SHARD.fullmatch(_stem(source)) for source in sources]
    shards = [(m["split"], int(m["index"]), int(m["count"])) for m in matches if m is not None]
    one_split = len(shards) == len(sources) and len({(s, c) for s, _, c in shards}) == 1
    if len(sources) > 1 and not (one_split and len({i for _, i, _ in shards}) == len(shards)):
        _refuse_shared_split(sources, name, split, directories)
    if not one_split:
        return sources
    given = {index: source for (_, index, _), source in zip(shards, sources, strict=True)}
    stem, _, count = shards[0]
    missing = next((i for i in range(count) if i not in given), None)
    if split is None and missing is not None:
        raise DataFileError(
            f"--input {sources[0]}: split '{name}' comes in {count} shards and"
            f" {stem}-{missing:05d}-of-{count:05d} is not given; give every shard, or"
            " --split NAME to convert these alone"
        )
    return [given[i] for i in sorted(given)]


def _refuse_shared_split(
    sources: list[str], name: str, split: str | None, directories: bool
) -> None:
    """Several inputs named for one split (`--split train` given with two, or `a/train.jsonl`
    and `b/train.jsonl`): the second table silently replaced the first in
    OUT/sft/train.parquet. Loose one-problem `.json` files of a dataset read from directories
    (MATH's) are pointed to the directory route (`directory_route`), one split per directory:
    "one at a time" made each problem a table."""
    why = "--split names every input's split" if split else "split names come from file names"
    route = directory_route(sources, split) if directories else None
    instead = route or "convert them one at a time, each with its own --split"
    raise DataFileError(
        f"--input {sources[0]} and --input {sources[1]} both make split '{name}' ({why}); {instead}"
    )


def _require(row: dict[str, Any], dataset: str, *columns: str) -> list[str]:
    """The text of each of `columns` in `dataset`'s row, else ValueError naming them and,
    for a table of another kind (an SFT or RL table already, the other dataset's rows),
    what it is (`table_kind_hint`)."""
    missing = [c for c in columns if not isinstance(row.get(c), str)]
    if missing:
        raise ValueError(
            f"column(s) {missing} missing or not text (found {sorted(row)})"
            f"{table_kind_hint(row, dataset)}"
        )
    return [row[c] for c in columns]


def _sft_row(prompt: str, response: str, split: str, index: int) -> dict[str, Any]:
    return {
        "messages": [
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": response},
        ],
        "extra_info": {"split": split, "index": index},
    }


def _rl_row(
    source: str, prompt: str, truth: str, split: str, index: int, question: str, answer: str
) -> dict[str, Any]:
    return {
        "data_source": source,
        "prompt": [{"role": "user", "content": prompt}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": truth},
        "extra_info": {"split": split, "index": index, "question": question, "answer": answer},
    }
