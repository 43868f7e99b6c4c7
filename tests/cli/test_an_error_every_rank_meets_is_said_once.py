"""`mfsdp train --nproc-per-node 2` resuming a checkpoint every rank refuses alike (a truncated
`.distcp`) printed the `error:` line once per rank, and under --json, whenever rank 0 was not
the rank torchrun saw fail first, a second JSON object ("rank 1: ..."): stdout no longer
parsed. A result printed into a closed stdout pipe (rank 0 exits 141) made the launcher print
its own object into that pipe and end 1 with a BrokenPipeError traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from cli.launch import CONFIG_CHECKED
from cli.main import EXIT_CLOSED_PIPE
from tests.support.paths import FIXTURES, REPO

FSDP_STEP = FIXTURES / "megatron_fsdp_qwen2" / "run" / "global_step_2"
TRUNCATED_TO = 100


def _two_ranks(*args: str, stdout: int = subprocess.PIPE) -> subprocess.CompletedProcess:
    """cli/torchrun.py running tests/support/launched_rank.py ARGS on two ranks, as the
    launching `mfsdp train --nproc-per-node 2` runs it."""
    command = [sys.executable, "-m", "cli.torchrun", "--standalone", "--nproc-per-node=2"]
    command += ["-m", "tests.support.launched_rank", *args]
    env = {**os.environ, CONFIG_CHECKED: "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        command, cwd=REPO, env=env, stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=300
    )


@pytest.fixture
def truncated_step(tmp_path):
    step = tmp_path / "global_step_2"
    shutil.copytree(FSDP_STEP, step)
    os.truncate(step / "dist_ckpt" / "__0_0.distcp", TRUNCATED_TO)
    return step


def _refusal(step) -> str:
    """What one process resuming `step` says (the same command on a single rank)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    code = (
        "import sys; from mfsdp_ckpt.checkpointer import load_checkpoint;"
        " from mfsdp_ckpt.format.checkpoint_resolution import resolve_checkpoint\n"
        "try: load_checkpoint(resolve_checkpoint(sys.argv[1]), {'model': {}},"
        " contents=('model',))\n"
        "except Exception as err: print(err)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(step)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "truncated" in done.stdout, done.stdout + done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("late", [[], ["--late-rank", "0"], ["--late-rank", "1"]])
def test_a_checkpoint_every_rank_refuses_is_one_line_and_one_json_object(truncated_step, late):
    """Whichever rank gets to the refusal first, the run says it once, as one process does.
    With rank 0 late, rank 1 may be the only one that got to it before the run stopped:
    then it is said with rank 1's number (the launcher cannot tell it from a refusal only
    rank 1's view of the files met), never twice."""
    refusal = _refusal(truncated_step)
    done = _two_ranks("loads", str(truncated_step), *late, "--json")
    assert done.returncode == 1, done.stderr
    said = [refusal, f"rank 1: {refusal}"] if late == ["--late-rank", "0"] else [refusal]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].removeprefix("error: ") in said, done.stderr
    assert json.loads(done.stdout) == {"error": lines[0].removeprefix("error: "), "exit_code": 1}


def test_a_result_printed_into_a_closed_pipe_ends_the_launch_quietly_with_141():
    reader, writer = os.pipe()
    os.close(reader)
    try:
        done = _two_ranks("prints-result", "--json", stdout=writer)
    finally:
        os.close(writer)
    assert (done.returncode, done.stderr) == (EXIT_CLOSED_PIPE, "")
