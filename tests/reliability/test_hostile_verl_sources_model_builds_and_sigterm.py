"""Hostile inputs to `config from-verl` and to the model build, and SIGTERM mid-write:

* `mfsdp config from-verl` of a FIFO nobody writes to (a named pipe, `<(...)` whose writer
  is gone) blocked forever in open(); a socket or a device (/dev/zero) was opened and read
  too. Only a regular file is read now, as `--config` takes only one: one line naming the
  file and what it is (exit 2), at once.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from tests.support.cli_errors import one_error
from tests.support.paths import REPO

# Long enough for Python and click to start on a busy machine, far shorter than "forever".
QUICK_SECONDS = 60


def _mfsdp_within(seconds: float, *args: str) -> subprocess.CompletedProcess:
    """`mfsdp ARGS` in a fresh interpreter that must end within `seconds` (a hang fails the
    test instead of stalling the suite)."""
    return subprocess.run(
        [sys.executable, "-c", "from cli.main import main; main()", *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=seconds,
        stdin=subprocess.DEVNULL,
    )


def _fifo(path):
    os.mkfifo(path)


def _socket(path):
    with socket.socket(socket.AF_UNIX) as bound:
        bound.bind(str(path))


def _dev_zero(path):
    path.symlink_to("/dev/zero")


SPECIAL_SOURCES = {
    "fifo": (_fifo, "a FIFO, not a regular file"),
    "socket": (_socket, "a socket, not a regular file"),
    "dev-zero": (_dev_zero, "a character device, not a regular file"),
}


@pytest.mark.parametrize("case", list(SPECIAL_SOURCES))
def test_from_verl_reads_only_a_regular_file(tmp_path, case):
    make, words = SPECIAL_SOURCES[case]
    source = tmp_path / "run.sh"
    make(source)
    done = _mfsdp_within(QUICK_SECONDS, "config", "from-verl", source)
    assert done.returncode == 2, done.stderr[-2000:]
    one_error(done.stderr, str(source), words)
    assert done.stdout == ""
