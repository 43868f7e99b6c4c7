"""A result that stdout takes only part of (a disk that fills mid-write, a file size limit)
fails the command as a full stdout does: `error: stdout: cannot write the command's output
(...)`, exit 1.

Was: write(2) put out what fit and returned that count, CPython's BufferedWriter handed the
short count back without raising and click.echo dropped it: `--json > out.json` left a cut
JSON object, and the text lines a cut line, with exit 0 and nothing said. Here the limit
is RLIMIT_FSIZE, which needs no root: a write across it is short, the next one EFBIG.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

from tests.support.paths import FIXTURES, REPO

RUN = str(FIXTURES / "megatron_fsdp_qwen2" / "run")
LIMIT = 64  # bytes: less than any of these results
COMMANDS = {
    "inspect --json": ("ckpt", "inspect", RUN, "--json"),
    "validate": ("ckpt", "validate", RUN),
    "config defaults": ("config", "defaults", "sft"),
}


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


@pytest.mark.parametrize("args", COMMANDS.values(), ids=list(COMMANDS))
def test_a_result_cut_short_is_a_failure(args, tmp_path):
    out = tmp_path / "out"
    with out.open("w") as stdout:
        ended = subprocess.run(
            [sys.executable, "-c", "from cli.main import main; main()", *args],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"},
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_limited,
            timeout=120,
        )
    assert ended.returncode == 1, (ended.returncode, ended.stderr)
    assert ended.stderr == "error: stdout: cannot write the command's output (File too large)\n"
    assert out.stat().st_size == LIMIT
