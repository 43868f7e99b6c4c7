"""What a first-time user still hit: a peer rank's gloo traceback under the error of the
rank that stopped first (or under Ctrl-C), a mistyped checkpoint path with no hint of the
name meant, and a read-only --out reported as an errno on an internal lock file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from click.testing import CliRunner

from cli.launch import CONFIG_CHECKED
from cli.main import app
from tests.support.launched_rank import own_failure
from tests.support.paths import FIXTURES, REPO
from tests.support.permissions import run_cli_denied

MCORE_QWEN2 = FIXTURES / "mcore" / "qwen2"


def _nonblank_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


def _two_ranks(how: str, stopping: int = 0, *flags: str) -> subprocess.CompletedProcess:
    """cli/torchrun.py running tests/support/launched_rank.py on two ranks, as the launching
    `mfsdp train --nproc-per-node 2` runs it."""
    command = [sys.executable, "-m", "cli.torchrun", "--standalone", "--nproc-per-node=2"]
    command += ["-m", "tests.support.launched_rank", "one-stops", str(stopping), how, *flags]
    env = {**os.environ, CONFIG_CHECKED: "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_a_rank_that_fails_first_is_the_only_error_shown():
    done = _two_ranks("fails")
    assert done.returncode == 1, done.stderr
    assert _nonblank_lines(done.stderr) == [f"error: {own_failure(0)}"], done.stderr


def test_a_rank_killed_by_a_signal_is_named_in_one_line():
    done = _two_ranks("is-killed")
    assert done.returncode == 1, done.stderr
    assert _nonblank_lines(done.stderr) == [
        "error: rank 0: killed by SIGKILL (out of memory? see dmesg)"
    ], done.stderr


@pytest.mark.parametrize(
    "stopping, how, error",
    [
        (0, "fails", own_failure(0)),
        (1, "fails", f"rank 1: {own_failure(1)}"),
        (0, "is-killed", "rank 0: killed by SIGKILL (out of memory? see dmesg)"),
    ],
)
def test_under_json_the_run_prints_one_json_object_whichever_rank_stopped(stopping, how, error):
    """Rank 0 prints a failure's JSON object; when rank 0 only lost its peer (or was killed)
    the launcher prints the stopping rank's instead, so --json always ends in one object."""
    done = _two_ranks(how, stopping, "--json")
    assert done.returncode == 1, done.stderr
    assert [json.loads(line) for line in done.stdout.splitlines()] == [
        {"error": error, "exit_code": 1}
    ], done.stdout + done.stderr


def test_ranks_that_only_lost_each_other_say_so_once(tmp_path):
    """No rank said why (a hang ended by the collective timeout on every rank): the lowest
    rank's own message, once, and exit 1."""
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    from cli.errors import EXIT_PEER_LOST
    from cli.torchrun import _deciding_failure, _unsaid, rank_exit_code

    files = []
    for rank in (0, 1):
        files.append(tmp_path / f"{rank}.json")
        files[-1].write_text(f'{{"message": "lost contact: rank {rank}", "timestamp": 1}}')
    failures = {
        rank: ProcessFailure(rank, 10 + rank, EXIT_PEER_LOST, str(files[rank])) for rank in (0, 1)
    }
    failures[2] = ProcessFailure(2, 12, -signal.SIGTERM, str(tmp_path / "none.json"))
    rank, failure = _deciding_failure(failures)
    assert (rank, _unsaid(failure, failures)) == (0, "lost contact: rank 0")
    assert rank_exit_code(failure.exitcode) == 1


@pytest.mark.parametrize("command", [["validate"], ["inspect"], ["export-hf", "--out", "hf"]])
@pytest.mark.parametrize(
    "given, meant, steps",
    [
        ("runs/demo/sf", "runs/demo/sft", ""),
        ("runs/dmo/sft/global_step_80", "runs/demo/sft/global_step_80", ""),
        (
            "runs/demo/sft/global_step_81",
            "runs/demo/sft/global_step_80",
            " (step dirs here: global_step_40, global_step_80)",
        ),
    ],
)
def test_a_mistyped_checkpoint_path_names_the_closest_one(
    tmp_path, monkeypatch, command, given, meant, steps
):
    for step in (40, 80):  # complete steps: an empty step dir is a save that did not finish
        step_dir = tmp_path / "runs" / "demo" / "sft" / f"global_step_{step}"
        step_dir.mkdir(parents=True)
        (step_dir / "manifest.json").write_text("{}")
    (tmp_path / "runs" / "demo" / "data").mkdir()
    monkeypatch.chdir(tmp_path)
    name, *options = command
    done = CliRunner().invoke(app, ["ckpt", name, given, *options])
    assert done.exit_code == 2, done.output
    assert _nonblank_lines(done.stderr) == [
        f"error: {given}: no such file or directory; relative paths are read from {tmp_path};"
        f" did you mean {meant}?{steps}"
    ]


@pytest.mark.parametrize("given", ["zzzz", "gone"])
def test_a_path_like_no_name_there_gets_no_guess(tmp_path, given):
    """Nothing close, or only the name itself (a link to what was removed)."""
    (tmp_path / "sft").mkdir()
    (tmp_path / "gone").symlink_to(tmp_path / "removed")
    done = CliRunner().invoke(app, ["ckpt", "validate", str(tmp_path / given)])
    assert done.exit_code == 2
    assert _nonblank_lines(done.stderr) == [f"error: {tmp_path / given}: no such file or directory"]


def test_an_out_this_user_cannot_write_is_refused_in_one_line_naming_it(tmp_path):
    """Every command with --out (as a user whom mode 0o555 denies: tests run as root), before
    any work: not `[Errno 13] Permission denied: '.../.hf.out-lock'` (exit 1)."""
    hf = tmp_path / "hf"
    exported = CliRunner().invoke(
        app,
        ["ckpt", "export-hf", str(MCORE_QWEN2 / "dist_ckpt"), "--out", str(hf)]
        + ["--hf-config", str(MCORE_QWEN2 / "config.json")],
    )
    assert exported.exit_code == 0, exported.output
    gsm8k = tmp_path / "train.jsonl"
    gsm8k.write_text(json.dumps({"question": "1 + 1?", "answer": "1 + 1 = 2\n#### 2"}) + "\n")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    out = locked / "out"
    commands = {
        "export-hf": ["ckpt", "export-hf", str(MCORE_QWEN2 / "dist_ckpt"), "--out", str(out)]
        + ["--hf-config", str(MCORE_QWEN2 / "config.json")],
        "import-hf": ["ckpt", "import-hf", str(hf), "--out", str(out)],
        "data gsm8k": ["data", "gsm8k", "--input", str(gsm8k), "--out", str(out)],
        "data synthetic": ["data", "synthetic", "--out", str(out)],
        "demo": ["demo", "--out", str(out)],
    }
    records = run_cli_denied(list(commands.values()))
    expected = f"error: --out {out}: {locked} is not writable by this user; choose another --out"
    for name, record in zip(commands, records):
        assert (record["exit"], record["escaped"]) == (2, None), (name, record)
        assert _nonblank_lines(record["stderr"]) == [expected], (name, record)
    assert list(locked.iterdir()) == []
