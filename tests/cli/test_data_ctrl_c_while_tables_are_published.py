"""A Ctrl-C that lands while `mfsdp data` puts its tables in place leaves all of them old
or all new, never a mix, and a run that had put them all in place says so.

Was: the renames of the finished tables were not shielded from SIGINT, so one landing
between two of them left `sft/train.parquet` new beside the old `rl/train.parquet` and
`rl/test.parquet` (with another seed, an old held-out split overlapping the new train
split), and one after the last rename said only "error: interrupted" of a complete set.
The signal is sent from inside the process right after the N-th table is renamed into
place (where a Ctrl-C landing there would come), every other call runs as it does.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli.data import SYNTHETIC_TABLES
from tests.support.fresh_python import mfsdp
from tests.support.paths import REPO

# `mfsdp ARGS`, with SIGINT sent to itself right after the AFTER-th table (a `.parquet`
# name) is renamed or linked into place
SIGINT_AFTER_NTH_TABLE = """
import os, signal, sys
after, count = int(os.environ["AFTER"]), [0]
def signalling(call):
    def published(source, target, *args, **kwargs):
        call(source, target, *args, **kwargs)
        if str(target).endswith(".parquet"):
            count[0] += 1
            if count[0] == after:
                os.kill(os.getpid(), signal.SIGINT)
    return published
os.replace, os.link = signalling(os.replace), signalling(os.link)
sys.argv = ["mfsdp", *sys.argv[1:]]
from cli.main import main
main()
"""


def _tables(out: Path) -> dict[str, str]:
    return {
        name: hashlib.sha256((out / name).read_bytes()).hexdigest() for name in SYNTHETIC_TABLES
    }


def _interrupted(after: int, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", SIGINT_AFTER_NTH_TABLE, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "AFTER": str(after), "PYTHONPATH": str(REPO)},
    )


@pytest.fixture(scope="module")
def sets(tmp_path_factory) -> tuple[dict[str, str], dict[str, str], Path]:
    """The tables of seed 1 (old) and of seed 2 (new), and a dir holding the old ones."""
    root = tmp_path_factory.mktemp("sets")
    for seed in ("1", "2"):
        done = mfsdp("data", "synthetic", "--out", str(root / seed), "--seed", seed)
        assert done.returncode == 0, done.stderr
    old, new = _tables(root / "1"), _tables(root / "2")
    assert all(old[name] != new[name] for name in SYNTHETIC_TABLES)
    return old, new, root / "1"


@pytest.mark.parametrize("after", range(1, len(SYNTHETIC_TABLES) + 1))
def test_overwrite_interrupted_while_publishing_is_all_new_and_says_so(tmp_path, sets, after):
    old, new, old_dir = sets
    out = tmp_path / "t"
    subprocess.run(["cp", "-a", str(old_dir), str(out)], check=True)
    assert _tables(out) == old
    done = _interrupted(after, "data", "synthetic", "--out", str(out), "--seed", "2", "--overwrite")
    assert done.returncode == 130, done.stderr
    assert _tables(out) == new  # never a mix of the two sets
    lines = done.stderr.splitlines()
    assert lines[-1] == "error: interrupted", done.stderr
    assert "stopped once all were: every table is this run's, complete" in lines[-2], lines
    assert sorted(p.name for p in out.rglob("*") if p.name.startswith(".")) == []


@pytest.mark.parametrize("after", range(1, len(SYNTHETIC_TABLES) + 1))
def test_a_new_out_interrupted_while_publishing_is_complete(tmp_path, sets, after):
    _old, new, _old_dir = sets
    out = tmp_path / "fresh"
    done = _interrupted(after, "data", "synthetic", "--out", str(out), "--seed", "2")
    assert done.returncode == 130, done.stderr
    assert _tables(out) == new
    assert "every table is this run's, complete" in done.stderr, done.stderr
