"""`mfsdp train` among files it did not write (was: trained, exit 0, without a word).

A config.yaml in `trainer.run_dir` that mfsdp did not write, the very --config file the run
reads included, was replaced by the run's resolved config: its comments gone and a one-off
command-line override (`optim.lr=1e-3`) baked into the file the next sibling run reads.
And `trainer.run_dir=..` or `.` trained into the current directory or its parent, among a
project's files (replacing its config.yaml too), though `run_dir: ""`, the same directory,
was refused. Both are refused now: exit 2, one line, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli_errors import one_error
from tests.support.fresh_python import mfsdp
from tests.support.paths import EXAMPLES
from tests.support.sft import write_chat_jsonl

EXAMPLE = EXAMPLES / "sft_tiny_cpu.yaml"
QUICK = ("trainer.total_steps=2", "trainer.eval_every=0", "trainer.progress_bar=false")


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under `root` with the bytes of each file (None for a directory)."""
    return {
        str(path.relative_to(root)): path.read_bytes() if path.is_file() else None
        for path in sorted(root.rglob("*"))
    }


def test_the_config_file_given_in_the_run_dir_is_kept_as_it_is(tmp_path):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=48)
    (tmp_path / "exp1").mkdir()
    mine = tmp_path / "exp1" / "config.yaml"
    mine.write_text("# lr sweep base, shared with the team\n" + EXAMPLE.read_text())
    before = _tree(tmp_path / "exp1")
    args = ["train", "sft", "--config", "exp1/config.yaml", f"data.train_files={data}"]
    done = mfsdp(*args, "trainer.run_dir=exp1", "optim.lr=1e-3", *QUICK, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    one_error(
        done.stderr,
        "exp1/config.yaml: not a config mfsdp wrote",
        "training into exp1 would replace it",
        "keep it outside the run dir, or give another trainer.run_dir",
    )
    assert _tree(tmp_path / "exp1") == before


def test_a_config_yaml_among_someone_elses_files_is_kept(tmp_path):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=48)
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "config.yaml").write_text("optim:\n  lr: 0.5  # mine\n")
    (junk / "notes.txt").write_text("notes\n")
    before = _tree(junk)
    args = ["train", "sft", "--config", str(EXAMPLE), f"data.train_files={data}", "--json"]
    done = mfsdp(*args, "trainer.run_dir=junk", *QUICK, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    line = one_error(done.stderr, "junk/config.yaml: not a config mfsdp wrote")
    assert json.loads(done.stdout) == {"error": line.removeprefix("error: "), "exit_code": 2}
    assert _tree(junk) == before


@pytest.mark.parametrize("inside, run_dir", [("work", ".."), ("src", ".")])
def test_the_current_directory_or_its_parent_is_no_run_dir(tmp_path, inside, run_dir):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=48)
    project = tmp_path / "proj"
    (project / "src").mkdir(parents=True)
    (project / "work").mkdir()
    (project / "config.yaml").write_text("optim:\n  lr: 0.5  # my notes\n")
    (project / "src" / "train.py").write_text("print(1)\n")
    before = _tree(project)
    args = ["train", "sft", "--config", str(EXAMPLE), f"data.train_files={data}"]
    done = mfsdp(*args, f"trainer.run_dir={run_dir}", *QUICK, cwd=project / inside)
    assert done.returncode == 2, done.stderr
    one_error(
        done.stderr,
        f"trainer.run_dir: {run_dir} ({(project / inside / run_dir).resolve()})",
        "is the current directory or above it; name a new one",
    )
    assert _tree(project) == before
