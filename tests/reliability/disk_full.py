"""A save that runs out of disk: the resumed pristine run's next save hits a full filesystem
(tmpfs as root, RLIMIT_FSIZE elsewhere) and must fail in one line, leaving the previous step,
the tracker and no temp dir behind."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

from mfsdp_ckpt.format import run_steps
from tests.reliability.outcome import Expect, Observed, Outcome, invoke
from tests.reliability.sft_run import BASE_STEP, fresh_copy, sft_args, step_dir, tree_digest
from tests.support.paths import REPO

DISK_FULL_HEADROOM = 256 << 10  # bytes free once the run is copied in: far less than one save


def disk_full_run(pristine: Path, scratch: Path) -> tuple[Observed, str]:
    """Resume the pristine run on a filesystem that fills up during the next save.

    As root (CI containers, this project's dev machines) the run lives on a tmpfs mounted
    just big enough, so the write fails with ENOSPC; elsewhere RLIMIT_FSIZE makes the
    kernel fail the first large write with EFBIG. Either way: one `error:` line, exit 1,
    step 2 and the tracker untouched, no temp dir left behind."""
    run = fresh_copy(pristine, scratch / "src")
    used = sum(p.stat().st_size for p in run.rglob("*") if p.is_file())
    mount = scratch / "disk"
    mount.mkdir()
    mounted = (
        os.geteuid() == 0
        and subprocess.run(
            [
                "mount",
                "-t",
                "tmpfs",
                "-o",
                f"size={used + DISK_FULL_HEADROOM}",
                "tmpfs",
                str(mount),
            ],
            capture_output=True,
        ).returncode
        == 0
    )
    how = "tmpfs (ENOSPC)" if mounted else "RLIMIT_FSIZE (EFBIG)"
    try:
        target = mount / "run"
        shutil.copytree(run, target)
        shutil.copy(scratch / "src" / "train.jsonl", mount / "train.jsonl")
        before = tree_digest(step_dir(target))

        def limit_file_size() -> None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (DISK_FULL_HEADROOM, DISK_FULL_HEADROOM))

        command = [
            sys.executable,
            "-m",
            "cli.train",
            "sft",
            *sft_args(
                scratch / "src" / "train.jsonl", target, f"trainer.total_steps={BASE_STEP + 2}"
            )[2:],
        ]
        done = subprocess.run(
            command,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            preexec_fn=None if mounted else limit_file_size,
        )
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        outcome = Outcome(
            done.returncode,
            errors[0] if errors else done.stderr.strip()[-300:],
            done.stderr,
            "Traceback" in done.stderr,
        )
        problems = Expect(1, "saving step").check(outcome)
        if len(errors) != 1:
            problems.append(f"{len(errors)} error lines")
        if tree_digest(step_dir(target)) != before or run_steps.read_tracker(target) != BASE_STEP:
            problems.append("the previous checkpoint or the tracker changed")
        if list(target.glob("*.tmp")):
            problems.append("a temp step dir was left behind")
        if invoke(["ckpt", "validate", target, "--deep"]).exit_code != 0:
            problems.append("the run does not validate after the failed save")
        return Observed(outcome, problems), how
    finally:
        if mounted:
            subprocess.run(["umount", str(mount)], check=False)
