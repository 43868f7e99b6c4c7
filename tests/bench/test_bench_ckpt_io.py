"""bench/ckpt_io.py runs end to end on CPU (gloo, FSDP2, the tiny shape), so none of its rows
rots between GPU runs: every baseline is measured (none failed), mfsdp's async save loads back
equal to the model."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.paths import REPO

EXPECTED = (
    "dcp.save (baseline)",
    "dcp.save, FileSystemWriter(thread_count=2)",
    "dcp.async_save (to completion",
    "dcp.async_save, BlockingAsyncStager (to completion",
    "mfsdp save, 2 writer threads",
    "dcp.load (baseline)",
    "mfsdp load",
    "mfsdp async save 1 (to commit)",
    "mfsdp async save 2 (to commit)",
)


@pytest.mark.slow  # about 7 CPU seconds: torch and transformers imported in a child
def test_every_row_runs_on_cpu(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    argv = [sys.executable, str(REPO / "bench" / "ckpt_io.py"), "--dir", str(tmp_path / "b")]
    done = subprocess.run(
        [*argv, "--device", "cpu", "--shape", "tiny", "--threads", "2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "mfsdp_async loads back equal to the model's shards at save time: True" in done.stdout
    record = json.loads(done.stdout.strip().splitlines()[-1])
    methods = [row["method"] for row in record["rows"]]
    for name in EXPECTED:
        assert sum(m.startswith(name) for m in methods) == 1, (name, methods)
    assert not [m for m in methods if "failed" in m]
    timed = [row for row in record["rows"] if "seconds" in row]
    assert all(row["seconds"] > 0 for row in timed), timed
