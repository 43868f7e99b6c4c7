"""`mfsdp train --nproc-per-node 2` names the rank a failure came from unless every rank met
it alike: a checkpoint only one rank refused (its node's copy differs) was said without its
rank, an unreadable checkpoint file every rank met was said once per rank, a SIGTERM sent to
rank 1 alone was reported as rank 0's (torchrun's SIGTERM that stopped it), and a rank's
bug (not an mfsdp error) left torchrun's placeholder as the JSON object's `error`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time

import pytest

from tests.support.cli_errors import error_prefixed_lines
from tests.support.launched_rank import (
    own_failure,
    run_two_ranks,
    two_ranks_command,
    two_ranks_env,
)
from tests.support.paths import FIXTURES, REPO
from tests.support.permissions import without_root_overrides

FSDP_STEP = FIXTURES / "megatron_fsdp_qwen2" / "run" / "global_step_2"


def _one_error(done: subprocess.CompletedProcess) -> str:
    """The run's one `error:` line, checked to be its JSON object's `error` too."""
    lines = error_prefixed_lines(done.stderr)
    assert len(lines) == 1, done.stderr
    error = lines[0].removeprefix("error: ")
    assert [json.loads(line) for line in done.stdout.splitlines()] == [
        {"error": error, "exit_code": 1}
    ], done.stdout + done.stderr
    return error


def test_a_checkpoint_only_one_rank_refuses_is_said_with_that_rank(tmp_path):
    good, damaged = tmp_path / "good" / "global_step_2", tmp_path / "damaged" / "global_step_2"
    shutil.copytree(FSDP_STEP, good)
    shutil.copytree(FSDP_STEP, damaged)
    os.truncate(damaged / "dist_ckpt" / "__0_0.distcp", 100)
    done = run_two_ranks("loads-own", str(good), str(damaged), "--json")
    assert done.returncode == 1, done.stderr
    error = _one_error(done)
    assert error.startswith(f"rank 1: {damaged / 'dist_ckpt' / '__0_0.distcp'}: "), error
    assert "truncated" in error


@pytest.fixture
def unreadable(tmp_path):
    denied = tmp_path / "__0_0.distcp"
    denied.write_bytes(b"\0" * 8)
    denied.chmod(0)
    return denied


def test_a_file_every_rank_cannot_read_on_resume_is_said_once(unreadable):
    done = run_two_ranks(
        "reads-own", str(unreadable), str(unreadable), "--json", prefix=without_root_overrides()
    )
    assert done.returncode == 1, done.stderr
    error = _one_error(done)
    assert error.startswith(f"{unreadable}: "), error  # not after a rank number


def test_a_file_one_rank_cannot_read_on_resume_is_said_with_that_rank(unreadable, tmp_path):
    readable = tmp_path / "readable"
    readable.write_bytes(b"\0" * 8)
    done = run_two_ranks(
        "reads-own", str(readable), str(unreadable), "--json", prefix=without_root_overrides()
    )
    assert done.returncode == 1, done.stderr
    assert _one_error(done).startswith(f"rank 1: {unreadable}: ")


@pytest.mark.parametrize("raising", [0, 1])
def test_a_rank_s_bug_is_its_one_line_in_the_json_object(raising):
    done = run_two_ranks("raises", str(raising), "--json")
    assert done.returncode == 1, done.stderr
    assert _one_error(done) == f"rank {raising}: ValueError: {own_failure(raising)}"
    assert "Traceback" in done.stderr  # a bug keeps its traceback


def _pids(pid_dir, ranks: int, launched: subprocess.Popen) -> list[int]:
    """The ranks' pids, once each has left its own in `pid_dir`."""
    while not all((pid_dir / str(rank)).exists() for rank in range(ranks)):
        assert launched.poll() is None, launched.communicate()
        time.sleep(0.05)
    return [int((pid_dir / str(rank)).read_text()) for rank in range(ranks)]


@pytest.mark.parametrize("killed", [0, 1])
def test_a_sigterm_sent_to_one_rank_is_said_as_that_rank_s(tmp_path, killed):
    launched = subprocess.Popen(
        two_ranks_command("waits", str(tmp_path), "--json"),
        cwd=REPO,
        env=two_ranks_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        os.kill(_pids(tmp_path, 2, launched)[killed], signal.SIGTERM)
        stdout, stderr = launched.communicate(timeout=120)
    finally:
        launched.kill()
    done = subprocess.CompletedProcess(launched.args, launched.returncode, stdout, stderr)
    assert done.returncode == 1, stderr
    assert _one_error(done) == f"rank {killed}: killed by SIGTERM"
