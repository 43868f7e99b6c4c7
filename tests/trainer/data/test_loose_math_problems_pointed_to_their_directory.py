"""Loose MATH problem files (one `.json` file per problem) given as several --input of one
split are pointed to the directory route: the official release is one split per directory
(MATH/train/<subject>/<n>.json), and `mfsdp data math --input DIR` reads it so. The refusal
said "convert them one at a time, each with its own --split", which makes every problem a
table of its own; given without --split, each file's name made a split, a table per problem.
The line names the --input to give, and that command converts; so do the command's --help
examples."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cli.main import app
from tests.support.cli_errors import one_error
from tests.support.interop_layouts import run_cli

SUBJECTS = ("algebra", "geometry")


def _problem(n: int) -> dict[str, str]:
    return {"problem": f"{n} + 1?", "level": "Level 1", "solution": f"$\\boxed{{{n + 1}}}$"}


@pytest.fixture
def release(tmp_path: Path, monkeypatch) -> Path:
    """MATH/{train,test}/<subject>/<n>.json and MATH/train.parquet, the current directory
    the one holding MATH."""
    monkeypatch.chdir(tmp_path)
    for split in ("train", "test"):
        for subject in SUBJECTS:
            folder = tmp_path / "MATH" / split / subject
            folder.mkdir(parents=True)
            for n in (1, 2):
                (folder / f"{n}.json").write_text(json.dumps(_problem(n)))
    pq.write_table(pa.Table.from_pylist([_problem(1), _problem(2)]), "MATH/train.parquet")
    return Path("MATH")


def _refused_with(*args: str | Path) -> str:
    code, _, err = run_cli("data", "math", *args, "--out", "out")
    assert code == 2, err
    return one_error(err, "both make split 'train' (--split names every input's split)")


def test_loose_problems_of_one_split_are_pointed_to_their_directory(release):
    loose = [release / "train" / subject / "1.json" for subject in SUBJECTS]
    line = _refused_with("--input", loose[0], "--input", loose[1], "--split", "train")
    route = "a directory of one .json file per problem is one split: give the one holding them,"
    assert line.endswith(f"{route} --input {release / 'train'} --split train"), line
    given = shlex.split(line.rsplit(", ", 1)[1])
    code, _, err = run_cli("data", "math", *given, "--out", "out")
    assert code == 0, err
    assert pq.read_table("out/rl/train.parquet").num_rows == 4  # every train problem


def test_loose_problems_in_the_current_directory_are_asked_into_one(release, monkeypatch):
    monkeypatch.chdir(release / "train" / "algebra")
    line = _refused_with("--input", "1.json", "--input", "./2.json", "--split", "train")
    assert line.endswith("move them into one and give it, --input DIR --split train"), line


def test_loose_problems_without_a_split_are_pointed_to_their_directory(release):
    """Without --split each file's name (`1.json`) made a split of its own: sft/1.parquet,
    sft/2.parquet, ..., one table per problem, exit 0."""
    loose = [release / "train" / subject / f"{n}.json" for n, subject in enumerate(SUBJECTS, 1)]
    code, _, err = run_cli("data", "math", "--input", loose[0], "--input", loose[1], "--out", "out")
    assert code == 2 and not Path("out").exists(), err
    line = one_error(err, f"--input {loose[0]} and --input {loose[1]}: files of one problem")
    route = "a directory of one .json file per problem is one split: give the one holding them,"
    assert line.endswith(f"{route} --input {release / 'train'}"), line
    code, _, err = run_cli("data", "math", *shlex.split(line.rsplit(", ", 1)[1]), "--out", "out")
    assert code == 0, err
    assert pq.read_table("out/rl/train.parquet").num_rows == 4  # every train problem


def test_one_loose_problem_takes_a_split_to_convert_alone(release):
    problem = release / "train" / "algebra" / "2.json"
    code, _, err = run_cli("data", "math", "--input", problem, "--out", "out")
    assert code == 2, err
    line = one_error(err, f"--input {problem}: a file of one problem")
    assert line.endswith(f"--input {problem.parent}, or --split NAME to convert it alone"), line
    code, _, err = run_cli("data", "math", "--input", problem, "--split", "train", "--out", "out")
    assert code == 0, err
    assert pq.read_table("out/rl/train.parquet").num_rows == 1


def test_tables_of_one_split_are_still_asked_one_at_a_time(release):
    (release / "test.parquet").write_bytes((release / "train.parquet").read_bytes())
    tables = ["--input", release / "train.parquet", "--input", release / "test.parquet"]
    line = _refused_with(*tables, "--split", "train")
    assert line.endswith("convert them one at a time, each with its own --split"), line


def test_the_help_examples_convert(release):
    examples = [
        shlex.split(line.strip())[1:]
        for line in app.commands["data"].commands["math"].help.splitlines()
        if line.strip().startswith("mfsdp data math")
    ]
    assert len(examples) >= 2
    for example in examples:
        code, _, err = run_cli(*example, "--overwrite")
        assert code == 0, (example, err)
