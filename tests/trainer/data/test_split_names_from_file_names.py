"""A split named by an input's file name meets the rule `--split` does.

Was: `mfsdp data gsm8k --input 'tr<newline>ain<ESC>[31m.jsonl'` wrote
`OUT/sft/tr<newline>ain<ESC>[31m.parquet` and `--input 'train .jsonl'` wrote
`OUT/sft/train .parquet` (names `--split` refuses), and a 240-character file name failed
only after every input was read (`...parquet: not written (File name too long)`, exit 1).

Was too: a file's name up to its first dot named its split, so `gsm8k.train.jsonl` with
`gsm8k.test.jsonl` failed as both split `gsm8k` and no file could name `train.clean`; and
the Hub's shards as older `datasets.push_to_hub` named them
(`train-00000-of-00001-<fingerprint>.parquet`) made a split of the whole name.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
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
    "a download's copy number": "train (1).jsonl",
    "a plus": "train+extra.jsonl",
    "an at sign": "train@v2.jsonl",
    "a hidden file's": ".train.jsonl",
}
# Two pushes' fingerprints (`datasets` hashes a shard's content to 16 hex digits)
FINGERPRINTS = ("5f2c1d8e0a9b7c63", "0b3e9a4d1c2f7e85")


def _input(folder: Path, name: str, dataset: str = "gsm8k") -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(ROWS[dataset]) + "\n")
    return path


def _never_read(monkeypatch: pytest.MonkeyPatch) -> None:
    def iter_file_rows(source: object) -> None:
        raise AssertionError(f"{source} read before its split name was checked")

    monkeypatch.setattr("trainer.data.math_datasets.iter_file_rows", iter_file_rows)


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


@pytest.mark.parametrize(
    ("name", "split"),
    [
        ("gsm8k.train.jsonl", "train"),
        ("gsm8k.test.parquet", "test"),
        ("math.validation.json", "validation"),
        ("gsm8k.main.dev.jsonl", "dev"),
        ("GSM8K.val.JSONL", "val"),
        ("train.clean.jsonl", "train.clean"),
        ("gsm8k.jsonl", "gsm8k"),
        ("gsm8k.v2.jsonl", "gsm8k.v2"),
        ("train.clean.100-00000-of-00002.parquet", "train.clean.100"),
        (f"train-00001-of-00002-{FINGERPRINTS[0]}.parquet", "train"),
        (f"test-00000-of-00001-{FINGERPRINTS[1]}.parquet", "test"),
    ],
)
def test_a_file_names_its_split_less_its_data_suffix_alone(tmp_path, name, split):
    """The split word ending a name (as the datasets library reads one) is its split, else
    the whole name less its suffix; a Hub shard's split, fingerprint or not, is kept whole."""
    assert split_named_by(tmp_path / name) == split


def test_a_datasets_train_and_test_files_make_its_train_and_test_splits(tmp_path):
    sources = [_input(tmp_path / "inputs", f"gsm8k.{split}.jsonl") for split in ("train", "test")]
    out = tmp_path / "out"
    args = ("data", "gsm8k", "--input", sources[0], "--input", sources[1], "--out", out)
    code, stdout, stderr = run_cli(*args)
    assert code == 0, stdout + stderr
    assert sorted(p.name for p in (out / "sft").iterdir()) == ["test.parquet", "train.parquet"]
    rows = pq.read_table(out / "rl" / "test.parquet").to_pylist()
    assert [row["extra_info"]["split"] for row in rows] == ["test"]


def _fingerprinted_shard(folder: Path, index: int, answer: int) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / f"train-{index:05d}-of-00002-{FINGERPRINTS[index]}.parquet"
    row = {"question": f"{answer}?", "answer": f"#### {answer}"}
    pq.write_table(pa.Table.from_pylist([row]), path)
    return path


def test_the_hubs_fingerprinted_shards_make_one_split_in_shard_order(tmp_path):
    shards = [_fingerprinted_shard(tmp_path / "inputs", i, answer=i + 1) for i in (1, 0)]
    out = tmp_path / "out"
    args = ("data", "gsm8k", "--input", shards[0], "--input", shards[1], "--out", out)
    code, stdout, stderr = run_cli(*args)
    assert code == 0, stdout + stderr
    rows = pq.read_table(out / "rl" / "train.parquet").to_pylist()
    assert [row["reward_model"]["ground_truth"] for row in rows] == ["1", "2"]


def test_a_fingerprinted_shard_given_alone_asks_for_the_rest(tmp_path):
    shard = _fingerprinted_shard(tmp_path / "inputs", 1, answer=2)
    code, _stdout, stderr = run_cli("data", "gsm8k", "--input", shard, "--out", tmp_path / "o")
    assert code == 2
    one_error(stderr, "split 'train' comes in 2 shards", "train-00000-of-00002 is not given")
