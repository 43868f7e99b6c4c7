"""One file given twice to `mfsdp data gsm8k|math` is said to be that: `--input X --input X`
was "both make split 'train' ...; convert them one at a time, each with its own --split",
which would convert the one file twice. Paths are compared resolved: `./X`, an absolute
path and a link to it are X too; two different files of one split are still that error."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from cli.main import app
from tests.support.cli_errors import one_error

ROW = {"question": "What is 3 + 4?", "answer": "3 + 4 = 7\n#### 7"}


@pytest.fixture
def source(tmp_path, monkeypatch) -> str:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.jsonl").write_text(json.dumps(ROW) + "\n")
    (tmp_path / "link.jsonl").symlink_to("train.jsonl")
    return "train.jsonl"


def _gsm8k(*inputs: str):
    args = [part for name in inputs for part in ("--input", name)]
    return CliRunner().invoke(app, ["data", "gsm8k", *args, "--out", "out"])


def test_the_same_name_twice(source):
    done = _gsm8k(source, source)
    assert done.exit_code == 2, done.output
    line = one_error(done.stderr, f"--input {source}: the same file given twice; give it once")
    assert "both make split" not in line


@pytest.mark.parametrize("again", ["./train.jsonl", "link.jsonl", "absolute"])
def test_another_name_of_the_same_file(source, tmp_path, again):
    again = str(tmp_path / source) if again == "absolute" else again
    done = _gsm8k(source, again)
    assert done.exit_code == 2, done.output
    one_error(
        done.stderr,
        f"--input {source} and {again}: the same file ({(tmp_path / source).resolve()})",
        "given twice; give it once",
    )


def test_two_files_of_one_split_are_still_that(source, tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "train.jsonl").write_text(json.dumps(ROW) + "\n")
    done = _gsm8k(source, "b/train.jsonl")
    assert done.exit_code == 2, done.output
    one_error(done.stderr, "both make split 'train'")
    assert not (tmp_path / "out").exists()
