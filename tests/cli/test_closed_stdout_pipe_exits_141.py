"""A command whose stdout's reader went away (`mfsdp ckpt validate RUN | true`) ends quietly
with 141, as SIGPIPE ends Unix tools: click's handling exited 1, which says the check or the
run failed, for a valid checkpoint and for an import written in full. Nothing is printed,
not even Python's "Exception ignored ... BrokenPipeError" at exit."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cli.main import EXIT_CLOSED_PIPE
from tests.support.interop_layouts import run_cli
from tests.support.paths import FIXTURES, repo_env

FSDP_RUN = FIXTURES / "megatron_fsdp_qwen2" / "run"


def _into_a_closed_pipe(*args: str) -> subprocess.CompletedProcess:
    """`mfsdp ARGS` in a fresh interpreter whose stdout is a pipe whose reader has closed."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        return subprocess.run(
            [sys.executable, "-c", "from cli.main import main; main()", *args],
            stdout=writer,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            env=repo_env(),
        )
    finally:
        os.close(writer)


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["--version"],
        ["ckpt", "validate", "--help"],
        ["ckpt", "validate", str(FSDP_RUN)],
        ["ckpt", "validate", str(FSDP_RUN), "--json"],
        ["ckpt", "inspect", str(FSDP_RUN), "--json"],
    ],
    ids=" ".join,
)
def test_a_closed_stdout_ends_the_command_quietly_with_141(args):
    done = _into_a_closed_pipe(*args)
    assert (done.returncode, done.stderr) == (EXIT_CLOSED_PIPE, "")


def test_an_import_into_a_closed_stdout_keeps_what_it_wrote(tmp_path):
    code, _out, err = run_cli("ckpt", "export-hf", FSDP_RUN, "--out", tmp_path / "hf")
    assert code == 0, err
    done = _into_a_closed_pipe(
        "ckpt", "import-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "back"), "--json"
    )
    notes = done.stderr.splitlines()  # import-hf's notes go to stderr, --json or not
    assert done.returncode == EXIT_CLOSED_PIPE and all(n.startswith("note: ") for n in notes)
    code, _out, err = run_cli("ckpt", "validate", tmp_path / "back")
    assert code == 0, err
