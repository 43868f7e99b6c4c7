"""Hostile conditions on the output side: a write that fails or is interrupted halfway must
leave nothing that reads as a complete result, and a rerun must need no manual cleanup.

* `mfsdp data gsm8k|math|synthetic` write a set of tables (sft/ and rl/) that trainers read
  together: a full disk, Ctrl-C or a bad later input halfway used to leave part of the set
  in place (sft/train.parquet new, rl/train.parquet missing) with an error naming no file.
* `mfsdp ckpt export-hf` on a full disk named its hidden work dir (removed by then), or no
  file at all, instead of --out.
* validate, validate --deep, inspect and export-hf of a read-only checkpoint leave every
  byte, mode and mtime in it as it was.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli_errors import one_error
from tests.support.interop_layouts import run_cli
from tests.support.paths import FIXTURES
from tests.support.permissions import run_cli_denied


def _gsm8k(path: Path, rows: int = 20) -> Path:
    path.write_text(
        "".join(
            json.dumps({"question": f"q{i}", "answer": f"a #### {i}"}) + "\n" for i in range(rows)
        )
    )
    return path


def _listing(root: Path) -> dict[str, bytes]:
    """Every file under `root` (hidden ones too) with its bytes; {} when there is no `root`."""
    if not root.exists():
        return {}
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _fail_second_table_write(monkeypatch, failure: BaseException) -> None:
    """The second table written gets part of its bytes on disk, then `failure`: the disk
    filling up (ENOSPC) or Ctrl-C landing mid-write."""
    import pyarrow.parquet as pq

    tables = []

    class FailingSecond(pq.ParquetWriter):
        def __init__(self, where, *args, **kwargs):
            super().__init__(where, *args, **kwargs)
            self.handle = where
            tables.append(where)

        def write_table(self, table, *args, **kwargs):
            if len(tables) == 2 and self.handle is tables[1]:
                self.handle.write(b"PAR1" + b"\0" * 64)  # a cut-short file
                raise failure
            return super().write_table(table, *args, **kwargs)

    monkeypatch.setattr(pq, "ParquetWriter", FailingSecond)


DATA_COMMANDS = {
    "gsm8k": lambda tmp, out: [
        "data",
        "gsm8k",
        "--input",
        _gsm8k(tmp / "train.jsonl"),
        "--out",
        out,
    ],
    "synthetic": lambda tmp, out: ["data", "synthetic", "--out", out],
}


@pytest.mark.parametrize("command", sorted(DATA_COMMANDS))
def test_a_data_command_that_runs_out_of_disk_leaves_no_table_behind(
    tmp_path, monkeypatch, command
):
    out = tmp_path / "out"
    args = DATA_COMMANDS[command](tmp_path, out)
    _fail_second_table_write(monkeypatch, OSError(errno.ENOSPC, "Error writing bytes to file"))
    code, _stdout, stderr = run_cli(*args)
    assert code == 1
    one_error(stderr, str(out), "No space left on device")
    assert _listing(out) == {}
    monkeypatch.undo()
    code, _stdout, stderr = run_cli(*args)  # the rerun needs no cleanup
    assert code == 0, stderr
    assert all(not name.split("/")[-1].startswith(".") for name in _listing(out))


def test_ctrl_c_while_writing_data_keeps_the_previous_tables_whole(tmp_path, monkeypatch):
    out = tmp_path / "out"
    args = DATA_COMMANDS["gsm8k"](tmp_path, out)
    assert run_cli(*args)[0] == 0
    before = _listing(out)
    _fail_second_table_write(monkeypatch, KeyboardInterrupt())
    code, _stdout, stderr = run_cli(*args, "--overwrite")
    assert code == 130, stderr
    assert _listing(out) == before


def test_a_bad_second_input_leaves_data_out_as_it_was(tmp_path):
    out = tmp_path / "out"
    bad = tmp_path / "test.jsonl"
    bad.write_text(json.dumps({"question": "q"}) + "\n")  # no answer column
    code, _stdout, stderr = run_cli(
        "data", "gsm8k", "--input", _gsm8k(tmp_path / "train.jsonl"), "--input", bad, "--out", out
    )
    assert code == 2
    one_error(stderr, str(bad))
    assert _listing(out) == {}


def test_a_killed_data_runs_leftovers_are_removed_by_the_next_run(tmp_path):
    out = tmp_path / "out"
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    (out / "rl").mkdir(parents=True)
    leftover = out / "rl" / f".train.parquet.{int(dead.stdout)}-{'0' * 16}.tmp"
    leftover.write_bytes(b"PAR1")
    assert run_cli(*DATA_COMMANDS["gsm8k"](tmp_path, out))[0] == 0
    assert not leftover.exists()
    assert sorted(_listing(out)) == ["rl/train.parquet", "sft/train.parquet"]


# ---------------------------------------------------------------- export-hf / validate
MFSDP_RUN = FIXTURES / "megatron_fsdp_qwen2" / "run"


def _fail_with_enospc(monkeypatch, function: str) -> None:
    """`os.<function>` fails as a full disk does: posix_fallocate when the files are
    reserved, a large pwrite midway through the tensors, fsync at the end."""
    real = getattr(os, function)

    def full(*args):
        if function != "pwrite" or len(args[1]) > 64:  # a lock file's pid line still goes
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(*args)

    monkeypatch.setattr(os, function, full)


@pytest.mark.parametrize("function", ["posix_fallocate", "pwrite", "fsync"])
def test_an_export_that_runs_out_of_disk_names_out_and_leaves_nothing(
    tmp_path, monkeypatch, function
):
    out = tmp_path / "hf"
    _fail_with_enospc(monkeypatch, function)
    code, _stdout, stderr = run_cli("ckpt", "export-hf", MFSDP_RUN, "--out", out)
    monkeypatch.undo()
    assert code == 1
    line = one_error(stderr, str(out), "No space left on device")
    assert ".export-" not in line  # not the hidden work dir, which is gone by now
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    code, _stdout, stderr = run_cli("ckpt", "export-hf", MFSDP_RUN, "--out", out)
    assert code == 0, stderr


def _snapshot(root: Path) -> dict[str, tuple]:
    """Every path under `root` (and itself): mode, mtime and, for files, the bytes' hash."""
    paths = [root, *sorted(root.rglob("*"))]
    return {
        str(p): (
            p.lstat().st_mode,
            p.lstat().st_mtime_ns,
            hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None,
        )
        for p in paths
    }


def test_reading_a_read_only_checkpoint_changes_nothing_in_it(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(MFSDP_RUN, run)
    for path in [run, *run.rglob("*")]:
        path.chmod(path.stat().st_mode & ~0o222)
    before = _snapshot(run)
    try:
        records = run_cli_denied(
            [
                ["ckpt", "validate", str(run)],
                ["ckpt", "validate", str(run), "--deep"],
                ["ckpt", "inspect", str(run)],
                ["ckpt", "export-hf", str(run), "--out", str(tmp_path / "hf")],
            ]
        )
        assert [r["exit"] for r in records] == [0, 0, 0, 0], records
        assert _snapshot(run) == before
    finally:
        for path in [run, *run.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o200)
