"""A MATH table named by a number (`500.json` holding a JSON array of problems, or JSON
lines) is a split like any other: `mfsdp data math --input DIR/500.json` was refused as "a
file of one problem" for its name alone, and converted before that refusal came. A file is
judged by what it holds: one JSON object with a `problem` key (pretty-printed, after a BOM)
is still one problem, pointed to its directory."""

from __future__ import annotations

import json

import pytest

from tests.support.interop_layouts import run_cli
from trainer.data.files import DataFileError
from trainer.data.math_datasets import split_inputs


def _problem(n: int) -> dict[str, str]:
    return {"problem": f"{n} + 1?", "level": "Level 1", "solution": f"$\\boxed{{{n + 1}}}$"}


@pytest.mark.parametrize(
    "text",
    [
        json.dumps([_problem(n) for n in range(5)]),
        "\n  " + json.dumps([_problem(n) for n in range(5)], indent=2),
        "".join(json.dumps(_problem(n)) + "\n" for n in range(5)),
    ],
    ids=["array", "indented array", "json lines"],
)
def test_a_numbered_table_makes_its_own_split(tmp_path, text):
    table = tmp_path / "500.json"
    table.write_text(text)
    assert split_inputs([str(table)], None, directories=True) == {"500": [str(table)]}


@pytest.mark.parametrize(
    "text",
    [json.dumps(_problem(7)), "\ufeff" + json.dumps(_problem(7), indent=2) + "\n"],
    ids=["one line", "pretty after a BOM"],
)
def test_a_numbered_problem_is_still_pointed_to_its_directory(tmp_path, text):
    problem = tmp_path / "7.json"
    problem.write_text(text, encoding="utf-8")
    with pytest.raises(DataFileError, match="a file of one problem"):
        split_inputs([str(problem)], None, directories=True)


def test_the_numbered_table_converts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "500.json").write_text(json.dumps([_problem(n) for n in range(5)]))
    code, _, err = run_cli("data", "math", "--input", "500.json", "--out", "out")
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "out").rglob("*.parquet"))
