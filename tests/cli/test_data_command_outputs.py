"""What `mfsdp data gsm8k|math|synthetic` may write, and where.

Was: a user's own OUT/sft/train.parquet silently replaced (exit 0), tables written into a
training run's dir, `--split ../../x` written outside --out (and `a/b` into folders of its
own), the folders made for a failed run left behind, an --out under /proc or /sys a raw
errno naming the hidden lock file, and an empty input converted to 0-row tables (exit 0).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.cli_errors import one_error
from tests.support.interop_layouts import run_cli

GSM8K_ROW = {"question": "1 + 2?", "answer": "1 + 2 = 3\n#### 3"}
MATH_ROW = {"problem": "1 + 2?", "solution": "$\\boxed{3}$"}


def _source(tmp_path: Path, row: dict, name: str = "train.jsonl") -> Path:
    source = tmp_path / "inputs" / name
    source.parent.mkdir(exist_ok=True)
    source.write_text(json.dumps(row) + "\n")
    return source


def _args(command: str, tmp_path: Path, out: Path) -> list:
    """`mfsdp data COMMAND` writing OUT/sft/train.parquet among its tables."""
    if command == "synthetic":
        return ["data", "synthetic", "--out", out]
    row = GSM8K_ROW if command == "gsm8k" else MATH_ROW
    return ["data", command, "--input", _source(tmp_path, row), "--out", out]


def _files(root: Path) -> dict[str, bytes]:
    """Every file under `root` (hidden ones too) with its bytes."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _everything(root: Path) -> list[str]:
    """Every path under `root`, folders too."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# --------------------------------------------------------------------------- replacing
@pytest.mark.parametrize("command", ["gsm8k", "math", "synthetic"])
def test_a_file_already_at_a_table_path_is_refused_and_kept(tmp_path, command):
    out = tmp_path / "data"
    (out / "sft").mkdir(parents=True)
    (out / "sft" / "train.parquet").write_text("my hand-made data, not parquet")
    code, stdout, stderr = run_cli(*_args(command, tmp_path, out))
    assert code == 2, stdout + stderr
    one_error(stderr, f"{out / 'sft' / 'train.parquet'}: already exists", "--overwrite")
    assert _files(out) == {"sft/train.parquet": b"my hand-made data, not parquet"}
    assert not (out / "rl").exists()  # made for the run, removed with its failure


def test_a_second_run_into_one_out_is_refused_until_overwrite(tmp_path):
    out = tmp_path / "addition"
    assert run_cli("data", "synthetic", "--out", out)[0] == 0
    before = _files(out)
    code, _stdout, stderr = run_cli("data", "synthetic", "--out", out, "--seed", "1")
    assert code == 2
    one_error(stderr, "already exists (pass --overwrite to replace it)")
    assert _files(out) == before
    code, _stdout, stderr = run_cli("data", "synthetic", "--out", out, "--seed", "1", "--overwrite")
    assert code == 0, stderr
    after = _files(out)
    assert sorted(after) == sorted(before) and after != before


@pytest.mark.parametrize("command", ["gsm8k", "synthetic"])
def test_overwrite_replaces_the_tables_and_nothing_else(tmp_path, command):
    out = tmp_path / "data"
    (out / "sft").mkdir(parents=True)
    (out / "sft" / "train.parquet").write_text("old")
    (out / "sft" / "mine.parquet").write_text("a user's table")
    (out / "notes.txt").write_text("a user's notes")
    code, stdout, stderr = run_cli(*_args(command, tmp_path, out), "--overwrite")
    assert code == 0, stdout + stderr
    assert (out / "sft" / "train.parquet").read_bytes()[:4] == b"PAR1"
    assert (out / "sft" / "mine.parquet").read_text() == "a user's table"
    assert (out / "notes.txt").read_text() == "a user's notes"
    assert not [name for name in _files(out) if Path(name).name.startswith(".")]


def test_overwrite_never_replaces_a_directory_at_a_table_path(tmp_path):
    out = tmp_path / "data"
    (out / "rl" / "train.parquet").mkdir(parents=True)
    (out / "rl" / "train.parquet" / "part-0.parquet").write_text("a user's dataset dir")
    code, _stdout, stderr = run_cli("data", "synthetic", "--out", out, "--overwrite")
    assert code == 2
    one_error(stderr, f"{out / 'rl' / 'train.parquet'}: is a directory")
    assert _files(out) == {"rl/train.parquet/part-0.parquet": b"a user's dataset dir"}
    assert not (out / "sft").exists()


def test_synthetic_checks_every_table_it_writes(tmp_path):
    from cli.data import SYNTHETIC_TABLES

    out = tmp_path / "addition"
    assert run_cli("data", "synthetic", "--out", out)[0] == 0
    assert sorted(_files(out)) == sorted(SYNTHETIC_TABLES)
    for table in SYNTHETIC_TABLES:  # each one alone is refused
        other = tmp_path / table.replace("/", "_")
        (other / table).parent.mkdir(parents=True)
        (other / table).write_text("mine")
        code, _stdout, stderr = run_cli("data", "synthetic", "--out", other)
        assert code == 2, table
        one_error(stderr, f"{other / table}: already exists")
        assert _files(other) == {table: b"mine"}


def test_a_table_appearing_before_publishing_is_never_replaced(tmp_path):
    """The check comes first; publishing without --overwrite refuses a name taken since,
    and takes back the tables it published before it: all or none."""
    from trainer.data.files import DataFileError, write_tables

    first, second = tmp_path / "sft" / "train.parquet", tmp_path / "rl" / "train.parquet"
    second.parent.mkdir()
    second.write_text("appeared meanwhile")
    with pytest.raises(DataFileError, match="appeared while this command ran"):
        write_tables({first: [{"a": 1}], second: [{"a": 2}]}, replace=False)
    assert _files(tmp_path) == {"rl/train.parquet": b"appeared meanwhile"}


# --------------------------------------------------------------------------- checkpoints
def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "global_step_2").mkdir(parents=True)
    (run / "latest_checkpointed_iteration.txt").write_text("2\n")
    return run


@pytest.mark.parametrize(
    "where, words",
    [(".", "is a checkpoint or a training run's dir"), ("global_step_2/data", "lies inside")],
)
def test_a_run_dir_or_a_checkpoint_is_refused_as_out(tmp_path, where, words):
    run = _run_dir(tmp_path)
    before = _everything(run)
    out = run / where if where != "." else run
    code, _stdout, stderr = run_cli("data", "synthetic", "--out", out)
    assert code == 2
    one_error(stderr, f"--out {out}", words)
    assert _everything(run) == before


def test_a_step_name_the_run_has_not_saved_is_refused_as_out_saying_so(tmp_path):
    """`--out RUN/global_step_9`: "lies inside the checkpoint RUN/global_step_9" named a
    checkpoint that is not there; the name is the run's, for its saves."""
    run = _run_dir(tmp_path)
    before = _everything(run)
    for out, where in (
        (run / "global_step_9", "is"),
        (run / "global_step_9" / "data", f"lies in {run / 'global_step_9'}, which is"),
    ):
        code, _stdout, stderr = run_cli("data", "synthetic", "--out", out)
        assert code == 2
        assert one_error(stderr) == (
            f"error: --out {out}: {where} the name of a checkpoint step of the run {run} (its"
            " saves write there; none is saved there now); tables written there would be mixed"
            " into it, choose an --out outside it"
        )
    assert _everything(run) == before


@pytest.mark.parametrize("command", ["gsm8k", "math", "synthetic"])
@pytest.mark.parametrize("table_dir", ["sft", "rl"])
def test_an_out_whose_table_folder_is_a_run_dir_is_refused_before_writing(
    tmp_path, command, table_dir
):
    """`mfsdp demo --out D` makes D/sft a run: `mfsdp data synthetic --out D` wrote
    D/sft/train.parquet beside its global_step_4 (exit 0), and the next demo refused D."""
    out = tmp_path / "demo"
    run = _run_dir(out)
    run.rename(out / table_dir)
    args = _args(command, tmp_path, out)
    before = _everything(tmp_path)
    code, _stdout, stderr = run_cli(*args)
    assert code == 2
    assert one_error(stderr) == (
        f"error: --out {out}: {out / table_dir} is a checkpoint or a training run's dir; tables"
        " written there would be mixed into it, choose an --out outside it"
    )
    assert _everything(tmp_path) == before


def test_a_new_dir_beside_a_runs_steps_is_fine(tmp_path):
    """As export-hf's `--out RUN/hf`: a folder of its own, no checkpoint's files touched."""
    run = _run_dir(tmp_path)
    code, _stdout, stderr = run_cli("data", "synthetic", "--out", run / "data")
    assert code == 0, stderr
    assert (run / "data" / "rl" / "train.parquet").is_file()


# --------------------------------------------------------------------------- --split
@pytest.mark.parametrize(
    "split", ["../../escaped", "a/b", "{tmp}/abs", ".hidden", "..", "a..b", "train.", "", "tr ain"]
)
def test_a_split_that_is_not_one_plain_file_name_is_refused_up_front(tmp_path, split):
    split = split.format(tmp=tmp_path / "elsewhere")  # an absolute one: never the real /
    source = _source(tmp_path, GSM8K_ROW)
    work = tmp_path / "work"
    work.mkdir()
    code, _stdout, stderr = run_cli(
        "data", "gsm8k", "--input", source, "--out", work / "st" / "out", "--split", split
    )
    assert code == 2
    line = one_error(stderr, f"--split {split!r}: not a split name")
    assert "Errno" not in line and ".tmp-" not in line
    assert _everything(work) == []  # nothing written or made, inside --out or outside it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inputs", "work"]


@pytest.mark.parametrize("split", ["train.clean", "test-2", "validation_1"])
def test_split_names_as_the_datasets_library_makes_them_are_taken(tmp_path, split):
    out = tmp_path / "out"
    source = _source(tmp_path, GSM8K_ROW)
    code, _stdout, stderr = run_cli(
        "data", "gsm8k", "--input", source, "--out", out, "--split", split
    )
    assert code == 0, stderr
    assert sorted(_files(out)) == [f"rl/{split}.parquet", f"sft/{split}.parquet"]


def test_a_file_name_that_gives_no_split_asks_for_one(tmp_path):
    """`.hidden.jsonl` made the split '' and wrote the hidden files sft/.parquet and
    rl/.parquet."""
    source = _source(tmp_path, GSM8K_ROW, name=".hidden.jsonl")
    code, _stdout, stderr = run_cli("data", "gsm8k", "--input", source, "--out", tmp_path / "o")
    assert code == 2
    one_error(stderr, f"--input {source}: its file name gives split '.hidden'", "--split")
    assert not (tmp_path / "o").exists()


# --------------------------------------------------------------------------- failures
def test_a_failed_run_removes_the_folders_it_made(tmp_path):
    source = _source(tmp_path, GSM8K_ROW)  # a GSM8K row given to `data math`
    code, _stdout, stderr = run_cli("data", "math", "--input", source, "--out", tmp_path / "md/n/o")
    assert code == 2
    one_error(stderr, str(source), "missing or not text")
    assert not (tmp_path / "md").exists()


def test_a_failed_run_keeps_the_folders_that_were_there(tmp_path):
    out = tmp_path / "data"
    (out / "sft").mkdir(parents=True)
    source = _source(tmp_path, {"question": "no answer"})
    code, _stdout, _stderr = run_cli("data", "gsm8k", "--input", source, "--out", out)
    assert code == 2
    assert _everything(out) == ["sft"]


@pytest.mark.parametrize("out", ["/proc/x", "/sys/x", "/proc/x/y/z"])
def test_an_out_whose_parent_cannot_be_written_is_one_line_naming_out(out):
    """As root the permission bits say yes, and the lock file's creation failed as a raw
    `[Errno 13] Permission denied: '/sys/.x.out-lock'` (exit 1)."""
    top = "/" + Path(out).parts[1]
    if not os.path.isdir(top):
        pytest.skip(f"{top} is Linux's kernel file system; this machine has none to write into")
    code, _stdout, stderr = run_cli("data", "synthetic", "--out", out)
    assert code == 2, stderr
    line = one_error(stderr, f"--out {out}: ", "choose another --out")
    assert "out-lock" not in line and "Errno" not in line
    assert not os.path.exists(out)


@pytest.mark.parametrize(
    "name, text", [("train.jsonl", ""), ("train.jsonl", "\n\n"), ("train.json", "[]")]
)
def test_an_input_with_no_rows_is_refused_naming_it(tmp_path, name, text):
    source = tmp_path / name
    source.write_text(text)
    code, _stdout, stderr = run_cli("data", "gsm8k", "--input", source, "--out", tmp_path / "o")
    assert code == 1
    one_error(stderr, f"{source}: holds no rows")
    assert not (tmp_path / "o").exists()


def test_the_root_directory_as_out_is_one_line():
    """Was a traceback: the lock file beside `/` has no name (`PosixPath('/') has an empty
    name`)."""
    code, _stdout, stderr = run_cli("data", "synthetic", "--out", "/")
    assert code == 2
    one_error(stderr, "--out /: the root directory")
