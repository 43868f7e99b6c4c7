"""A closed stdout fails `mfsdp train --nproc-per-node N` as it fails one process: exit 1 and
`error: stdout: cannot write the command's output (...)`.

The /dev/null placeholder `ensure_standard_streams` opens on a closed descriptor was not
inheritable (`os.open` sets close-on-exec), so torchrun and every rank started with stdout
closed: rank 0's result line (and its --json object) went nowhere, the run exited 0 without
a word, and the ranks' own files took descriptor 1.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.paths import EXAMPLES, REPO
from tests.support.sft import write_chat_jsonl

LINE = "error: stdout: cannot write the command's output (Bad file descriptor)"
# what a process the command starts finds on 0, 1 and 2: open, and 1 not writable
CHILD = (
    "import os\n"
    "for fd in (0, 1, 2): os.fstat(fd)\n"
    "try:\n"
    "    os.write(1, b'x')\n"
    "except OSError:\n"
    "    raise SystemExit(0)\n"
    "raise SystemExit(3)\n"
)
PARENT = (
    "import subprocess, sys\n"
    "from cli.std_streams import ensure_standard_streams\n"
    "ensure_standard_streams()\n"
    f"sys.exit(subprocess.run([sys.executable, '-c', {CHILD!r}]).returncode)\n"
)


def _closing_standard_streams() -> None:
    for fd in (0, 1, 2):
        os.close(fd)


def test_the_placeholders_reach_the_processes_a_command_starts():
    started = subprocess.run(
        [sys.executable, "-c", PARENT],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        preexec_fn=_closing_standard_streams,
        timeout=60,
    )
    assert started.returncode == 0


@pytest.mark.parametrize("json_asked", [False, True], ids=["plain", "json"])
def test_a_closed_stdout_fails_two_ranks_in_one_line(tmp_path, json_asked):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    command = [sys.executable, "-c", "from cli.main import main; main()", "train", "sft"]
    command += ["--config", str(EXAMPLES / "sft_tiny_cpu.yaml"), "--nproc-per-node", "2"]
    command += [f"data.train_files={data}", "data.val_ratio=0", "trainer.total_steps=1"]
    command += [f"trainer.run_dir={tmp_path / 'run'}", "trainer.progress_bar=false"]
    ended = subprocess.run(
        command + (["--json"] if json_asked else []),
        cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)},
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: os.close(1),
        timeout=300,
    )
    lines = ended.stderr.splitlines()
    assert ended.returncode == 1, ended.stderr
    assert lines[-1] == LINE
    assert lines.count(LINE) == 1
