"""A split named by an input's file name meets the rule `--split` does.

Was: `mfsdp data gsm8k --input 'tr<newline>ain<ESC>[31m.jsonl'` wrote
`OUT/sft/tr<newline>ain<ESC>[31m.parquet` and `--input 'train .jsonl'` wrote
`OUT/sft/train .parquet` (names `--split` refuses), and a 240-character file name failed
only after every input was read (`...parquet: not written (File name too long)`, exit 1).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli_errors import one_error
from tests.support.interop_layouts import run_cli
from trainer.data.files import DataFileError
from trainer.data.math_datasets import split_inputs, split_named_by

ROWS = {
    "gsm8k": {"question": "1 + 2?", "answer": "1 + 2 = 3\n#### 3"},
    "math": {"problem": "1 + 2?", "solution": "$\\boxed{3}$"},
}
BAD_NAMES = {
    "control characters": "tr\nain\x1b[31m.jsonl",
    "a space": "train .jsonl",
    "too long": "t" * 240 + ".jsonl",
    "a Hub shard's": "tr ain-00000-of-00001.jsonl",
}


def _input(folder: Path, name: str, dataset: str = "gsm8k") -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(ROWS[dataset]) + "\n")
    return path


def _never_read(monkeypatch: pytest.MonkeyPatch) -> None:
    def read_rows(source: object) -> None:
        raise AssertionError(f"{source} read before its split name was checked")

    monkeypatch.setattr("trainer.data.math_datasets.read_rows", read_rows)


@pytest.mark.parametrize("dataset", ["gsm8k", "math"])
@pytest.mark.parametrize("name", list(BAD_NAMES.values()), ids=list(BAD_NAMES))
def test_a_file_name_no_split_may_have_is_refused_before_anything(
    tmp_path, monkeypatch, dataset, name
):
    source = _input(tmp_path / "inputs", name, dataset)
    _never_read(monkeypatch)
    out = tmp_path / "work" / "out"
    code, stdout, stderr = run_cli("data", dataset, "--input", source, "--out", out)
    assert code == 2, stdout + stderr
    line = one_error(stderr, "--input ", "its file name gives split", "give --split NAME")
    assert line.isprintable()  # the name's newline and escape written out: one line
    assert not (tmp_path / "work").exists()


def test_the_error_quotes_the_name_with_its_escapes_and_json_says_the_same(tmp_path):
    source = _input(tmp_path / "inputs", BAD_NAMES["control characters"])
    args = ("data", "gsm8k", "--input", source, "--out", tmp_path / "out")
    code, _stdout, stderr = run_cli(*args)
    assert code == 2
    one_error(stderr, "--input ", "tr\\x0aain\\x1b[31m.jsonl", "'tr\\nain\\x1b[31m'")
    code, stdout, _stderr = run_cli(*args, "--json")
    assert code == 2
    assert "give --split NAME" in json.loads(stdout)["error"]


@pytest.mark.parametrize("name", list(BAD_NAMES.values()), ids=list(BAD_NAMES))
def test_split_takes_the_place_of_the_file_name(tmp_path, name):
    source = _input(tmp_path / "inputs", name)
    out = tmp_path / "out"
    code, stdout, stderr = run_cli("data", "gsm8k", "--input", source, "--out", out, "--split", "x")
    assert code == 0, stdout + stderr
    assert sorted(p.name for p in (out / "sft").iterdir()) == ["x.parquet"]


def test_a_directory_or_a_missing_file_is_named_as_such_not_for_its_name(tmp_path):
    """`--split NAME` would not help: the directory, or the missing file, is the fault."""
    folder = tmp_path / "my data"
    _input(folder, "train.jsonl")
    code, _stdout, stderr = run_cli("data", "gsm8k", "--input", folder, "--out", tmp_path / "o")
    assert code == 2
    one_error(stderr, f"{folder}: a directory", f"--input {folder / 'train.jsonl'}")
    missing = tmp_path / "no such.jsonl"
    code, _stdout, stderr = run_cli("data", "gsm8k", "--input", missing, "--out", tmp_path / "o")
    assert code == 2
    one_error(stderr, f"{missing}: no such file")
    assert not (tmp_path / "o").exists()


def test_every_split_name_from_a_file_meets_the_rule(tmp_path):
    for name in BAD_NAMES.values():
        with pytest.raises(DataFileError, match="give --split NAME"):
            split_named_by(tmp_path / name)
    assert split_named_by(tmp_path / "train-00000-of-00002.parquet") == "train"
    assert split_named_by(tmp_path / "test.jsonl") == "test"


def test_split_inputs_groups_the_hubs_shards_without_reading_them(tmp_path, monkeypatch):
    _never_read(monkeypatch)
    shards = [str(_input(tmp_path, f"train-0000{i}-of-00002.jsonl")) for i in (1, 0)]
    assert split_inputs(shards, None) == {"train": shards[::-1]}
