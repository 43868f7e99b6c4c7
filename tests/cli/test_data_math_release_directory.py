"""`mfsdp data math` reads the official MATH release, a directory of one `.json` file per
problem (MATH/{train,test}/<subject>/<n>.json): `--input MATH/train` was refused as a
directory, two problem files as both making one split, and one file made split `1`, so the
release could not be converted at all. A directory is one split, named by it or --split,
its files read in sorted order; one holding split directories, tables or a link out of it
is refused naming what to give."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.cli_errors import one_error
from tests.support.interop_layouts import run_cli


def _problem(root: Path, split: str, subject: str, n: int) -> None:
    folder = root / split / subject
    folder.mkdir(parents=True, exist_ok=True)
    problem = {"problem": f"{split} {subject} {n}?", "level": "Level 1", "type": subject}
    solution = {"solution": f"So $\\boxed{{{n}}}$."}
    (folder / f"{n}.json").write_text(json.dumps({**problem, **solution}, indent=4))


@pytest.fixture
def release(tmp_path: Path) -> Path:
    root = tmp_path / "MATH"
    for split in ("train", "test"):
        for subject in ("geometry", "algebra"):
            for n in (2, 1):
                _problem(root, split, subject, n)
    return root


def test_each_split_directory_converts_in_sorted_order(tmp_path, release):
    out = tmp_path / "out"
    given = ["--input", release / "train", "--input", release / "test"]
    code, _, err = run_cli("data", "math", *given, "--out", out)
    assert code == 0, err
    for split in ("train", "test"):
        rows = pq.read_table(out / "rl" / f"{split}.parquet").to_pylist()
        asked = [row["extra_info"]["question"] for row in rows]
        assert asked == [f"{split} {s} {n}?" for s in ("algebra", "geometry") for n in (1, 2)]
        assert [row["reward_model"]["ground_truth"] for row in rows] == ["1", "2", "1", "2"]
        assert [row["extra_info"]["index"] for row in rows] == [0, 1, 2, 3]
        assert {row["extra_info"]["split"] for row in rows} == {split}
        assert pq.read_table(out / "sft" / f"{split}.parquet").num_rows == 4


def test_split_option_names_a_subject_directory(tmp_path, release):
    out = tmp_path / "out"
    code, _, err = run_cli(
        "data", "math", "--input", release / "train" / "algebra", "--split", "train", "--out", out
    )
    assert code == 0, err
    assert pq.read_table(out / "rl" / "train.parquet").num_rows == 2


def test_the_release_root_names_its_split_directories(tmp_path, release):
    code, _, err = run_cli("data", "math", "--input", release, "--out", tmp_path / "o")
    assert code == 2
    one_error(err, f"{release}: holds splits test, train; give each: --input {release / 'test'}")
    assert not (tmp_path / "o").exists()


def test_a_link_out_of_the_directory_is_refused(tmp_path, release):
    outside = tmp_path / "secret.json"
    outside.write_text(json.dumps({"problem": "p", "solution": "$\\boxed{1}$"}))
    link = release / "train" / "algebra" / "3.json"
    os.symlink(outside, link)
    code, _, err = run_cli("data", "math", "--input", release / "train", "--out", tmp_path / "o")
    assert code == 2
    one_error(err, f"{link}: a link out of the directory given")


def test_a_table_in_the_directory_and_an_empty_one_are_refused(tmp_path, release):
    table = release / "train" / "algebra" / "more.jsonl"
    table.write_text("")
    code, _, err = run_cli("data", "math", "--input", release / "train", "--out", tmp_path / "o")
    assert code == 2
    one_error(err, f"train: a directory; give its data files, one --input each: --input {table}")
    (tmp_path / "empty").mkdir()
    code, _, err = run_cli("data", "math", "--input", tmp_path / "empty", "--out", tmp_path / "o")
    assert code == 2
    one_error(err, "empty: a directory with no .json problem files")


def test_gsm8k_still_takes_files_alone(tmp_path, release):
    code, _, err = run_cli("data", "gsm8k", "--input", release / "train", "--out", tmp_path / "o")
    assert code == 2
    one_error(err, "train: a directory; give a data file")


def test_a_tree_nested_past_the_depth_cap_is_refused_in_one_line(tmp_path):
    """A tree ~1000 deep died of Python's recursion limit (a traceback, no JSON error)."""
    from trainer.data.problem_dirs import MAX_DEPTH

    root = tmp_path / "train"
    folders = [f"{root}{'/d' * level}" for level in range(1001)]
    for folder in folders:  # one level at a time: pathlib's and os.makedirs' recurse
        os.mkdir(folder)
    problem = Path(folders[-1], "1.json")
    problem.write_text(json.dumps({"problem": "p", "solution": "$\\boxed{1}$"}))
    try:
        code, _, err = run_cli("data", "math", "--input", root, "--out", tmp_path / "o")
        assert code == 2
        one_error(err, f"{root}: directories nested more than {MAX_DEPTH} deep")
        code, out, _ = run_cli("data", "math", "--input", root, "--out", tmp_path / "o", "--json")
        assert code == 2
        assert "nested more than" in json.loads(out)["error"]
    finally:  # as made: the recursive rmtree of tmp_path's cleanup dies in such a tree
        problem.unlink()
        for folder in reversed(folders):
            os.rmdir(folder)


def test_a_problem_reached_twice_through_a_link_converts_once(tmp_path, release):
    os.symlink("../algebra/1.json", release / "train" / "geometry" / "dup.json")
    out = tmp_path / "out"
    code, _, err = run_cli("data", "math", "--input", release / "train", "--out", out)
    assert code == 0, err
    rows = pq.read_table(out / "rl" / "train.parquet").to_pylist()
    asked = [row["extra_info"]["question"] for row in rows]
    assert asked == [f"train {s} {n}?" for s in ("algebra", "geometry") for n in (1, 2)]
