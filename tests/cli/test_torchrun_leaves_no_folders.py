"""`mfsdp train`'s torchrun (cli/torchrun.py) leaves nothing in the temp folder: plain torchrun
left an empty /tmp/torchelastic_* folder behind every run, hundreds after a day of runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

RANK_SCRIPTS = {
    "succeeds": "pass\n",
    "fails with its own message": (
        "from torch.distributed.elastic.multiprocessing.errors import record\n"
        "@record\n"
        "def main():\n"
        "    raise ValueError('the rank said why')\n"
        "main()\n"
    ),
}


@pytest.mark.parametrize("rank_does", sorted(RANK_SCRIPTS))
def test_a_run_leaves_no_folder_in_the_temp_dir(tmp_path, rank_does):
    temp = tmp_path / "tmp"
    temp.mkdir()
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPTS[rank_does])
    env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "cli.torchrun", "--nproc-per-node=1", "--standalone", str(script)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == (0 if rank_does == "succeeds" else 1), done.stderr
    if rank_does != "succeeds":
        assert "the rank said why" in done.stderr  # read from the rank's error file
    assert sorted(p.name for p in temp.iterdir()) == []
