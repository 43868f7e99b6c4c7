"""`mfsdp data` writes each table into a temp file beside it first, made new under a random
name (`mfsdp_ckpt.storage.temp_files.new_temp`), and renames it into place.

Was: the temp file was `.<table>.tmp-<pid>`, opened with open(..., "wb"): a symlink placed
there (`ln -s ~/notes.txt OUT/sft/.train.parquet.tmp-$$; exec mfsdp data ...`) had the
table written into the file it led to, outside --out, and was then published as the table:
`OUT/sft/train.parquet -> ~/notes.txt` (exit 0)."""

from __future__ import annotations

import os

import pyarrow.parquet as pq

from mfsdp_ckpt.storage.temp_files import new_temp
from tests.support.interop_layouts import run_cli
from trainer.data.files import write_tables


def test_a_link_at_a_tables_pid_temp_name_is_neither_written_through_nor_published(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious notes")
    out = tmp_path / "out"
    links = []
    for folder in ("sft", "rl"):
        (out / folder).mkdir(parents=True)
        for table in ("train", "test"):  # run_cli runs in this process: its pid
            link = out / folder / f".{table}.parquet.tmp-{os.getpid()}"
            link.symlink_to(victim)
            links.append(link)
    code, stdout, stderr = run_cli("data", "synthetic", "--out", out)
    assert code == 0, stdout + stderr
    assert victim.read_text() == "precious notes"
    for table in ("sft/train.parquet", "rl/train.parquet", "rl/test.parquet"):
        path = out / table
        assert path.is_file() and not path.is_symlink(), table
        assert pq.read_table(path).num_rows > 0
    assert all(link.is_symlink() for link in links)  # not this command's to remove


def test_a_killed_writers_temp_file_is_removed_and_a_running_ones_kept(tmp_path):
    """Temp files whose writer is gone are removed by the next write; one whose writer
    still runs (this process: a concurrent write) is left to it."""
    target = tmp_path / "train.parquet"
    dead_pid = 2**22 + 1  # past Linux's largest pid: no process has it
    dead = tmp_path / f".train.parquet.{dead_pid}-{'a' * 16}.tmp"
    dead.write_bytes(b"PAR1 cut short")
    live, fd = new_temp(target)
    os.close(fd)
    write_tables({target: [{"question": "q", "answer": "a"}]})
    assert not dead.exists() and live.exists()
    assert pq.read_table(target).to_pylist() == [{"question": "q", "answer": "a"}]
