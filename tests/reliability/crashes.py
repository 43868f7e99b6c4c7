"""Crash safety harness: a 2-process `mfsdp train sft` killed (SIGKILL) at each point of a
checkpoint save (`CRASHES`, through MFSDP_CKPT_KILL_AT), validated and resumed after each
kill, the kills chained through one run; the resumed losses must equal an uninterrupted
run's bitwise. Shared by tests/reliability/test_reliability_crash.py and
scripts/reliability_report.py."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from mfsdp_ckpt.kill_points import KILL_AT_ENV
from tests.reliability.outcome import Outcome, invoke
from tests.reliability.sft_run import sft_args
from tests.support.paths import REPO
from tests.support.sft import write_chat_jsonl


@dataclass(frozen=True)
class Crash:
    """One SIGKILL point of a 2-process save (MFSDP_CKPT_KILL_AT, see
    mfsdp_ckpt/kill_points.py): which phase, on which rank."""

    name: str
    when: str  # the moment, in the words of the save protocol
    target: str  # <phase>:<rank>
    async_save: bool = False


CRASHES: tuple[Crash, ...] = (
    Crash("before_files", "temp dir made, before any file", "before_files:1"),
    Crash("mid_file", "rank 1 dies 4 KiB into its first data file", "mid_file:1"),
    Crash("after_files", "all DCP files written, none hashed", "after_files:0"),
    Crash(
        "before_manifest",
        "files hashed, huggingface/ written, before the manifest",
        "before_manifest:0",
    ),
    Crash("after_manifest", "manifest written, before the rename", "after_manifest:0"),
    Crash("after_rename", "step dir renamed, before the tracker", "after_rename:0"),
    Crash(
        "async_mid_file",
        "async save: rank 0's background writer dies mid-file",
        "mid_file:0",
        async_save=True,
    ),
)

# The kills are chained through one run: it saves every 2 steps, the first launch is killed
# in the save of step 4, each resumed launch in the save 2 steps after the one it resumed
# from, and the last resumed launch finishes. So every kill point is also resumed from.
SAVE_EVERY = 2
CRASH_STEPS = SAVE_EVERY * (len(CRASHES) + 1)
CRASH_SETTINGS = (
    f"trainer.total_steps={CRASH_STEPS}",
    f"checkpoint.save_every={SAVE_EVERY}",
    "strategy.name=fsdp2",
)
CRASH_TIMEOUT_S = 240


def kill_step(index: int) -> int:
    """The step in whose save CRASHES[index] kills the run: 4, 6, 8, ..."""
    return SAVE_EVERY * (index + 2)


def kill_at(index: int) -> str:
    """MFSDP_CKPT_KILL_AT for CRASHES[index]: <phase>:<rank>@<step>."""
    return f"{CRASHES[index].target}@{kill_step(index)}"


def crash_data(root: Path) -> Path:
    return write_chat_jsonl(root / "train.jsonl", rows=40)


def launch_two_ranks(
    data: Path, run: Path, *extra: str, kill: str | None = None
) -> tuple[int, str]:
    """`mfsdp train sft --nproc-per-node 2` in its own session; on a hang (a rank stuck in a
    collective after its peer died) the whole process group is killed. Returns (rc, stderr)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop(KILL_AT_ENV, None)
    if kill:
        env[KILL_AT_ENV] = kill
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


def loss_records(run: Path) -> list[tuple[int, float]]:
    """(step, train loss) of every record in metrics.jsonl, in file order."""
    path = run / "metrics.jsonl"
    records = [
        json.loads(line) for line in (path.read_text().splitlines() if path.exists() else [])
    ]
    return [(r["step"], r["train/loss"]) for r in records if "train/loss" in r]


def losses(run: Path) -> dict[int, float]:
    """step -> train loss from metrics.jsonl (a resume removes the killed launch's records
    after the step it resumes from, so each step is logged once)."""
    return dict(loss_records(run))


@dataclass
class CrashResult:
    crash: Crash
    kill_at: str
    killed_rc: int
    validate: Outcome
    validated_step: int | None
    resumed_from: int | None
    losses_equal: bool  # the resumed launch's losses equal the uninterrupted run's
    seconds: float  # the killed launch and validate
    problems: list[str]


def _resumed_from(log: str) -> int | None:
    """The step a launch resumed from, from the line the run announces itself with
    (`[sft] ..., steps 4 -> 16 (resumed from .../global_step_4)`): a killed launch prints
    no `--json` summary."""
    found = re.search(r"steps (\d+) -> \d+ \(resumed from ", log)
    return int(found.group(1)) if found else None


def run_chain(data: Path, root: Path, reference: dict[int, float]) -> list[CrashResult]:
    """Launch, kill at CRASHES[0], validate, resume and kill at CRASHES[1], ..., resume to the
    end. Each kill must leave `validate` on the step saved before it (exit 0), the next launch
    must resume from that step, log the uninterrupted run's losses bit for bit and reach the
    next kill point; the run must finish with every loss equal and pass
    `validate --deep --strict`. One CrashResult per kill point, in order."""
    run = root / "chain"
    results: list[CrashResult] = []
    for index, crash in enumerate(CRASHES):
        started = time.monotonic()
        step = kill_step(index)
        extra = ("checkpoint.async_save=true",) if crash.async_save else ()
        killed_rc, killed_log = launch_two_ranks(data, run, *extra, kill=kill_at(index))
        if index:  # this launch resumed from the previous kill: judge that resume here
            _judge_resume(results[-1], run, killed_log, step, reference)
        problems = []
        if killed_rc == 0:
            problems.append(f"the run was not killed at {kill_at(index)} (it finished)")
        outcome = invoke(["ckpt", "validate", run, "--json"])
        try:
            validated_step = json.loads(outcome.output[outcome.output.index("{") :])["step"]
        except ValueError:
            validated_step = None
        if outcome.exit_code != 0 or validated_step != step - SAVE_EVERY:
            problems.append(
                f"validate: exit {outcome.exit_code}, step {validated_step}, expected exit 0,"
                f" step {step - SAVE_EVERY}: {outcome.message}"
            )
        results.append(
            CrashResult(
                crash,
                kill_at(index),
                killed_rc,
                outcome,
                validated_step,
                None,
                False,
                time.monotonic() - started,
                problems,
            )
        )
    last = results[-1]
    final_rc, final_log = launch_two_ranks(data, run)
    _judge_resume(last, run, final_log, CRASH_STEPS, reference)
    if final_rc != 0:
        last.problems.append(f"the last resume exited {final_rc}: {final_log[-800:]}")
    elif losses(run) != reference:
        last.problems.append(f"losses of the whole run {losses(run)} differ from {reference}")
    elif invoke(["ckpt", "validate", run, "--deep", "--strict"]).exit_code != 0:
        last.problems.append("the finished run's checkpoint does not validate --deep --strict")
    return results


def _judge_resume(
    killed: CrashResult,
    run: Path,
    log: str,
    reached: int,
    reference: dict[int, float],
) -> None:
    """Record on `killed` how the launch after it did: it must have resumed from the step
    saved before the kill and logged the uninterrupted run's losses for every step up to
    `reached` (its own kill point, or the end)."""
    expected_from = kill_step(CRASHES.index(killed.crash)) - SAVE_EVERY
    killed.resumed_from = _resumed_from(log)
    if killed.resumed_from != expected_from:
        killed.problems.append(f"resumed from {killed.resumed_from}, expected {expected_from}")
    records = loss_records(run)
    twice = sorted({step for step, _ in records if [s for s, _ in records].count(step) > 1})
    resumed = {k: v for k, v in records if k > expected_from}  # this launch's own steps
    wrong = {k: v for k, v in resumed.items() if reference.get(k) != v}
    missing = set(range(expected_from + 1, reached + 1)) - set(resumed)
    if twice:
        killed.problems.append(f"metrics.jsonl logs steps {twice} more than once")
    killed.losses_equal = not wrong and not missing
    if not killed.losses_equal:
        killed.problems.append(
            f"losses of the resumed launch {resumed} differ from the uninterrupted run's"
            f" {reference} (wrong at {sorted(wrong)}, missing {sorted(missing)})"
        )


def reference_run(data: Path, root: Path) -> dict[int, float]:
    rc, log = launch_two_ranks(data, root / "uninterrupted")
    if rc != 0:
        raise RuntimeError(f"uninterrupted run failed: {log[-2000:]}")
    return losses(root / "uninterrupted")
