"""OMP_NUM_THREADS is read as torch's libgomp reads it (libgomp/env.c): "²" was a traceback
in every command, "٣" and 99999999999999999999 were taken "as set" and libgomp then warned,
and "+1", which libgomp runs as 1, was dropped."""

from __future__ import annotations

import ctypes.util
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import FIXTURES, REPO
from trainer.threads import thread_count_setting

# omp_get_max_threads() returns an int: a count past it is one OpenMP cannot report
MAX_THREAD_COUNT = 2 ** (8 * ctypes.sizeof(ctypes.c_int) - 1) - 1

VALUES = [
    "4",
    "+1",
    " 2 ",
    "\t3\n",
    "1 ,+2",
    "4,2",
    "²",
    "٣",
    "\uff13",  # a full-width 3
    "99999999999999999999",
    str(MAX_THREAD_COUNT),
    str(MAX_THREAD_COUNT + 1),
    "0",
    "-1",
    "+ 1",
    "0x2",
    "1e3",
    "2,",
    ",2",
]

MAX_THREADS = """
import ctypes, sys
print(ctypes.CDLL(sys.argv[1]).omp_get_max_threads())
"""


def _torchs_libgomp() -> str:
    """The OpenMP runtime torch loads: its wheel's own copy, else the system's."""
    spec = importlib.util.find_spec("torch")
    assert spec is not None and spec.submodule_search_locations
    bundled = sorted(Path(spec.submodule_search_locations[0], "lib").glob("libgomp*.so*"))
    found = str(bundled[0]) if bundled else ctypes.util.find_library("gomp")
    assert found, "no libgomp"
    return found


def _libgomp_reads(value: str) -> tuple[int, bool]:
    """What libgomp makes of OMP_NUM_THREADS=`value`: omp_get_max_threads(), and whether it
    warned that the value is invalid."""
    done = subprocess.run(
        [sys.executable, "-c", MAX_THREADS, _torchs_libgomp()],
        env={**os.environ, "OMP_NUM_THREADS": value},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout), "Invalid value" in done.stderr


@pytest.mark.parametrize("value", VALUES)
def test_a_thread_count_is_what_libgomp_runs(value):
    threads, warned = _libgomp_reads(value)
    counted = not warned and 1 <= threads <= MAX_THREAD_COUNT
    assert thread_count_setting(value) == (threads if counted else None)


@pytest.mark.parametrize("value", ["²", "٣", "99999999999999999999", "+1"])
def test_every_value_is_one_note_at_most_and_no_libgomp_warning(value):
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from cli.main import main; main()",
            "ckpt",
            "validate",
            "--deep",
            str(FIXTURES / "mcore" / "qwen2" / "dist_ckpt"),
            "--hf-config",
            str(FIXTURES / "mcore" / "qwen2" / "config.json"),
        ],
        env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": value},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    kept = thread_count_setting(value) is not None
    notes = [line for line in done.stderr.splitlines() if line.startswith("note: OMP_NUM_THREADS")]
    assert len(notes) == (0 if kept else 1), done.stderr
    assert "libgomp" not in done.stderr and "Traceback" not in done.stderr, done.stderr
