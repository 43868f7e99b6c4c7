"""A command started with stdout closed (`mfsdp ... >&-`) cannot write its result: it exits
1 with the line a full stdout (`>/dev/full`) gets. It exited 0 with the result lost and
nothing said, while a full stdout was exit 1."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.paths import FIXTURES, REPO

_RUN = str(FIXTURES / "megatron_fsdp_qwen2" / "run")


def _closing_stdout() -> None:
    os.close(1)


def _mfsdp(*args: str, closed: bool) -> subprocess.CompletedProcess:
    """`mfsdp ARGS` with stdout closed, or (not `closed`) writing onto /dev/full."""
    with open(os.devnull if closed else "/dev/full", "w") as full:
        return subprocess.run(
            [sys.executable, "-c", "from cli.main import main; main()", *args],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_closing_stdout if closed else None,
            timeout=120,
        )


@pytest.mark.parametrize(
    "args",
    [("ckpt", "validate", _RUN), ("ckpt", "validate", _RUN, "--json"), ("--help",)],
    ids=" ".join,
)
def test_a_closed_stdout_is_a_failure_said_as_a_full_one(args):
    closed, full = _mfsdp(*args, closed=True), _mfsdp(*args, closed=False)
    assert full.returncode == 1, full.stderr
    assert full.stderr.startswith("error: stdout: cannot write the command's output ("), full.stderr
    assert closed.returncode == 1, closed.stderr
    assert (
        closed.stderr == "error: stdout: cannot write the command's output (Bad file descriptor)\n"
    )
