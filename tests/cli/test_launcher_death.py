"""The ranks of `mfsdp train --nproc-per-node N` die with the process the user started: a
`kill -9` of it (a scheduler's hard stop, an OOM kill of the launcher) left torchrun
(reparented to pid 1) and every rank training and saving into the run dir, whose lock had
died with the launcher, so a second run into the same dir started beside them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.paths import EXAMPLES, REPO
from tests.support.sft import write_chat_jsonl

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _parents() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, start time in clock ticks) of every live process, from /proc."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None:
                found[int(entry)] = (int(stat[1]), stat[19])
    return found


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (state first), None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def _descendants(root: int) -> dict[int, str]:
    """pid -> start time of every process below `root`."""
    table = _parents()
    found: dict[int, str] = {}
    grew = True
    while grew:
        grew = False
        for pid, (parent, started) in table.items():
            if pid not in found and (parent == root or parent in found):
                found[pid] = started
                grew = True
    return found


def _alive(pid: int, started: str) -> bool:
    """The same process (not a reused pid) still exists and is not a zombie."""
    stat = _stat(pid)
    return stat is not None and stat[19] == started and stat[0] not in ("Z", "X")


def _written(run_dir: Path) -> dict[str, tuple[int, int]]:
    return {
        str(path.relative_to(run_dir)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in run_dir.rglob("*")
        if path.exists()
    }


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    except OSError:
        return ""


def test_kill_9_of_the_launcher_stops_every_rank(tmp_path):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=48)
    run_dir = tmp_path / "run"
    log = tmp_path / "launcher.log"
    command = [sys.executable, "-c", "from cli.main import main; main()", "train", "sft"]
    command += ["--config", str(EXAMPLES / "sft_tiny_cpu.yaml"), "--nproc-per-node", "2"]
    command += [
        f"trainer.run_dir={run_dir}",
        f"data.train_files={data}",
        "trainer.progress_bar=false",
        "trainer.total_steps=100000",
        "trainer.log_every=1",
        "trainer.eval_every=0",
        "data.val_ratio=0",
        "checkpoint.save_every=1",
        "checkpoint.keep_last=2",
    ]
    # the ranks' lines go to a file, never a pipe: a pipe nobody reads (or one closed) would
    # stop orphaned ranks by itself, at their next line
    with open(log, "w") as out:
        launcher = subprocess.Popen(
            command,
            cwd=REPO,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    run: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 180
        while "[sft] step 1/" not in log.read_text():
            assert launcher.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        run = _descendants(launcher.pid)
        assert len(run) >= 3, (run, log.read_text())  # torchrun and its two ranks
        launcher.kill()
        stopped = time.monotonic() + 10
        while any(_alive(pid, started) for pid, started in run.items()):
            assert time.monotonic() < stopped, (
                "still running after the launcher's kill -9: "
                + ", ".join(
                    _command_line(pid)[:80] for pid, started in run.items() if _alive(pid, started)
                )
            )
            time.sleep(0.1)
        launcher.wait(timeout=10)
        before = _written(run_dir)
        time.sleep(3)
        assert _written(run_dir) == before  # nothing trains or saves into the run dir any more
    finally:
        for pid, started in run.items():  # what this test started, by pid
            if _alive(pid, started):
                os.kill(pid, signal.SIGKILL)
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
