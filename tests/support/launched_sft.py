"""A tiny SFT run launched as a user launches it, for tests that stop it or read its ranks'
errors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.paths import EXAMPLES, REPO


def launch_tiny_sft(tmp_path, *overrides: str, nproc: int = 2) -> subprocess.Popen:
    """`mfsdp train sft --nproc-per-node NPROC` on the tiny model, in its own session (so a
    test's Ctrl-C reaches every process, as a terminal's does)."""
    command = [sys.executable, "-c", "from cli.main import main; main()", "train", "sft"]
    command += ["--config", str(EXAMPLES / "sft_tiny_cpu.yaml"), "--nproc-per-node", str(nproc)]
    command += [f"trainer.run_dir={tmp_path / 'run'}", "trainer.progress_bar=false", *overrides]
    return subprocess.Popen(
        command,
        cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def lines_until_step(process: subprocess.Popen, step: int) -> list[str]:
    """The stderr lines `process` printed up to and including its `[sft] step STEP/` log line
    (all of them, should it end first): read up to there, the run is known to be training."""
    assert process.stderr is not None
    lines = []
    for line in process.stderr:
        lines.append(line)
        if line.startswith(f"[sft] step {step}/"):
            break
    return lines


def train_until_stopped(tmp_path, *overrides: str, nproc: int = 2) -> subprocess.Popen:
    """`launch_tiny_sft` on 48 chat rows written into `tmp_path`, for more steps than any test
    waits (100000): a run that trains until the test stops it."""
    from tests.support.sft import write_chat_jsonl

    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=48)
    return launch_tiny_sft(
        tmp_path, f"data.train_files={data}", "trainer.total_steps=100000", *overrides, nproc=nproc
    )


def step_reached(run_dir: Path, reached: int, newest: int | None, save_every: int) -> str:
    """` after step N` as a stopped run's line says it: with the note it adds when step N is
    one `save_every` saves and the newest checkpoint is older (a step is logged before it is
    saved, so the signal landed in that save or before it). The note says whether the cut
    save's `global_step_N.tmp` is left in `run_dir`, as it is now: ranks that fail remove it,
    ranks killed with their launcher leave it, and which happened is the signal's timing."""
    unsaved = save_every > 0 and reached % save_every == 0 and (newest or 0) < reached
    if not unsaved:
        return f" after step {reached}"
    tmp = run_dir / f"global_step_{reached}.tmp"
    if os.path.lexists(tmp):
        cut = f"step {reached}'s save was cut short; what it wrote is left in {tmp}, no checkpoint"
    else:
        cut = f"step {reached}'s save was cut short and removed"
    return f" after step {reached} ({cut})"
