"""Crash safety harness: a 2-process `mfsdp train sft` killed (SIGKILL) at each point of a
checkpoint save (`CRASHES`, through MFSDP_CKPT_KILL_AT), then validated and resumed; the
resumed losses must equal an uninterrupted run's bitwise. Shared by
tests/reliability/test_reliability_crash.py and scripts/reliability_report.py."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from mfsdp_ckpt.checkpointer import KILL_AT_ENV
from tests.reliability.outcome import Outcome, invoke
from tests.reliability.sft_run import sft_args
from tests.support.paths import REPO
from tests.support.sft import write_chat_jsonl

CRASH_STEPS = 4  # total steps; saves at 2 and 4, the kill lands in the save of step 4
CRASH_SETTINGS = (
    f"trainer.total_steps={CRASH_STEPS}",
    "checkpoint.save_every=2",
    "strategy.name=fsdp2",
)
CRASH_TIMEOUT_S = 180


@dataclass(frozen=True)
class Crash:
    """One SIGKILL point of a 2-process save (MFSDP_CKPT_KILL_AT, see
    mfsdp_ckpt/checkpointer.py)."""

    name: str
    when: str  # the moment, in the words of the save protocol
    kill_at: str  # <phase>:<rank>@<step>
    async_save: bool = False


CRASHES: tuple[Crash, ...] = (
    Crash("before_files", "temp dir made, before any file", f"before_files:1@{CRASH_STEPS}"),
    Crash("mid_file", "rank 1 dies 4 KiB into its first data file", f"mid_file:1@{CRASH_STEPS}"),
    Crash("after_files", "all DCP files written, none hashed", f"after_files:0@{CRASH_STEPS}"),
    Crash(
        "before_manifest",
        "files hashed, huggingface/ written, before the manifest",
        f"before_manifest:0@{CRASH_STEPS}",
    ),
    Crash(
        "after_manifest", "manifest written, before the rename", f"after_manifest:0@{CRASH_STEPS}"
    ),
    Crash("after_rename", "step dir renamed, before the tracker", f"after_rename:0@{CRASH_STEPS}"),
    Crash(
        "async_mid_file",
        "async save: rank 0's background writer dies mid-file",
        f"mid_file:0@{CRASH_STEPS}",
        async_save=True,
    ),
)


def crash_data(root: Path) -> Path:
    return write_chat_jsonl(root / "train.jsonl", rows=40)


def launch_two_ranks(
    data: Path, run: Path, *extra: str, kill_at: str | None = None
) -> tuple[int, str]:
    """`mfsdp train sft --nproc-per-node 2` in its own session; on a hang (a rank stuck in a
    collective after its peer died) the whole process group is killed. Returns (rc, stderr)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop(KILL_AT_ENV, None)
    if kill_at:
        env[KILL_AT_ENV] = kill_at
    command = [
        sys.executable,
        "-m",
        "cli.train",
        "sft",
        "--nproc-per-node",
        "2",
        "--json",
        *sft_args(data, run, *CRASH_SETTINGS, *extra)[2:],
    ]
    process = subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=CRASH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        return -9, f"timed out after {CRASH_TIMEOUT_S}s\n{err}"
    finally:
        # torchrun's workers share its session: nothing of this launch may outlive it
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    return process.returncode, out + err


def losses(run: Path, skip_lines: int = 0) -> dict[int, float]:
    """step -> train loss from metrics.jsonl after its first `skip_lines` lines (a resumed
    run appends; its lines override the killed run's)."""
    result = {}
    path = run / "metrics.jsonl"
    for line in (path.read_text().splitlines() if path.exists() else [])[skip_lines:]:
        record = json.loads(line)
        if "train/loss" in record:
            result[record["step"]] = record["train/loss"]
    return result


def metrics_lines(run: Path) -> int:
    path = run / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


@dataclass
class CrashResult:
    crash: Crash
    killed_rc: int
    validate: Outcome
    validated_step: int | None
    resume_rc: int
    resumed_from: int | None
    losses_equal: bool
    problems: list[str]


def run_crash(crash: Crash, data: Path, root: Path, reference: dict[int, float]) -> CrashResult:
    """Kill a 2-rank run in the save of step 4, validate, resume, compare losses bitwise."""
    run = root / crash.name
    extra = ("checkpoint.async_save=true",) if crash.async_save else ()
    killed_rc, _killed_log = launch_two_ranks(data, run, *extra, kill_at=crash.kill_at)
    problems = []
    if killed_rc == 0:
        problems.append("the run was not killed (fault point never reached)")
    outcome = invoke(["ckpt", "validate", run, "--json"])
    try:
        validated_step = json.loads(outcome.output[outcome.output.index("{") :])["step"]
    except ValueError:
        validated_step = None
    if outcome.exit_code != 0 or validated_step != CRASH_STEPS - 2:
        problems.append(
            f"validate: exit {outcome.exit_code}, step {validated_step}, expected exit 0, step 2"
        )
    logged_before_resume = metrics_lines(run)
    resume_rc, resume_log = launch_two_ranks(data, run, *extra)
    resumed_from = None
    for line in reversed(resume_log.splitlines()):
        if line.startswith("{"):
            resumed_from = json.loads(line).get("resumed_from")
            break
    if resume_rc != 0 or resumed_from != CRASH_STEPS - 2:
        problems.append(
            f"resume: exit {resume_rc}, resumed from {resumed_from}: {resume_log[-800:]}"
        )
    resumed = losses(run, skip_lines=logged_before_resume)  # what the resumed run itself computed
    equal = losses(run) == reference and resumed == {
        k: v for k, v in reference.items() if k > CRASH_STEPS - 2
    }
    if not equal:
        problems.append(
            f"losses differ from the uninterrupted run: {losses(run)} (resumed {resumed}) "
            f"vs {reference}"
        )
    if resume_rc == 0 and invoke(["ckpt", "validate", run, "--deep", "--strict"]).exit_code != 0:
        problems.append("the resumed run's final checkpoint does not validate --deep --strict")
    return CrashResult(
        crash, killed_rc, outcome, validated_step, resume_rc, resumed_from, equal, problems
    )


def reference_run(data: Path, root: Path) -> dict[int, float]:
    rc, log = launch_two_ranks(data, root / "uninterrupted")
    if rc != 0:
        raise RuntimeError(f"uninterrupted run failed: {log[-2000:]}")
    return losses(root / "uninterrupted")
