"""The ranks of `mfsdp train --nproc-per-node N` die with the process the user started: a
`kill -9` of it (a scheduler's hard stop, an OOM kill of the launcher) left torchrun
(reparented to pid 1) and every rank training and saving into the run dir, whose lock had
died with the launcher, so a second run into the same dir started beside them."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.launched_sft import step_reached
from tests.support.metrics import read_metrics
from tests.support.paths import EXAMPLES, REPO
from tests.support.sft import write_chat_jsonl
from tests.support.waiting import wait_until

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


def _launch(tmp_path: Path, log: Path) -> subprocess.Popen:
    """`mfsdp train sft --nproc-per-node 2` on the tiny model, saving every step for ever, in
    its own session (a signal the test sends reaches only whom it is sent to)."""
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=48)
    command = [sys.executable, "-c", "from cli.main import main; main()", "train", "sft"]
    command += ["--config", str(EXAMPLES / "sft_tiny_cpu.yaml"), "--nproc-per-node", "2"]
    command += [
        f"trainer.run_dir={tmp_path / 'run'}",
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
        return subprocess.Popen(
            command,
            cwd=REPO,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )


def _await_step(launcher: subprocess.Popen, log: Path, step: int) -> dict[int, str]:
    """Once the run has logged `step`: its processes (torchrun and its two ranks)."""
    wait_until(lambda: f"[sft] step {step}/" in log.read_text(), 180, log.read_text, launcher, 0.2)
    run = _descendants(launcher.pid)
    assert len(run) >= 3, (run, log.read_text())
    return run


def _still_running(run: dict[int, str]) -> list[str]:
    """The command lines of the processes of `run` that can still train or save: one whose
    command line reads empty has released its memory in its exit, not yet a zombie."""
    lines = [_command_line(pid) for pid, started in run.items() if _alive(pid, started)]
    return [line[:80] for line in lines if line]


def _kill_left(run: dict[int, str], launcher: subprocess.Popen) -> None:
    """Kill what the test started and what it started, by pid, should any be left."""
    for pid, started in run.items():
        if _alive(pid, started):
            os.kill(pid, signal.SIGKILL)
    if launcher.poll() is None:
        launcher.kill()
        launcher.wait()


@contextlib.contextmanager
def _run_at_step(tmp_path: Path, step: int) -> Iterator[tuple[subprocess.Popen, dict, Path]]:
    """The run launched (`_launch`) once it has logged `step`: its launcher, its processes
    (`_await_step`) and its log; whatever of it is left is killed afterwards."""
    log = tmp_path / "launcher.log"
    launcher = _launch(tmp_path, log)
    run: dict[int, str] = {}
    try:
        run.update(_await_step(launcher, log, step))
        yield launcher, run, log
    finally:
        _kill_left(run, launcher)


def _assert_nothing_written(run_dir: Path, seconds: float) -> None:
    """Nothing trains or saves into the run dir any more: it stays as it is for `seconds`."""
    before = _written(run_dir)
    time.sleep(seconds)
    assert _written(run_dir) == before


def test_kill_9_of_the_launcher_stops_every_rank(tmp_path):
    with _run_at_step(tmp_path, 1) as (launcher, run, _log):
        launcher.kill()
        # a rank whose command line reads empty is in its exit (its memory released): it can
        # neither train nor save, and on a loaded machine that exit may take seconds
        wait_until(
            lambda: not _still_running(run),
            30,
            lambda: f"still running after the launcher's kill -9: {_still_running(run)}",
            every=0.1,
        )
        launcher.wait(timeout=10)
        _assert_nothing_written(tmp_path / "run", seconds=3)


def _said(log: Path, run_dir: Path, stopped: str) -> tuple[list[str], list[str]]:
    """The run's `error:` lines, and the one line expected: `stopped` after the step the run
    reached, and the checkpoint the next run resumes from, as the run dir is now."""
    from mfsdp_ckpt.format import run_steps

    reached = max(record["step"] for record in read_metrics(run_dir))
    newest = run_steps.resume_step(run_dir)
    expected = (
        f"error: {stopped}{step_reached(run_dir, reached, newest, 1)}; the newest checkpoint is"
        f" {run_dir}/global_step_{newest}: run the same command again to resume from it"
    )
    return [line for line in log.read_text().splitlines() if "error" in line], [expected]


@pytest.mark.parametrize(
    "sent, code, stopped",
    [
        (signal.SIGKILL, 1, "torchrun, the ranks' launcher, was killed by SIGKILL"),
        (signal.SIGINT, 130, "interrupted"),
    ],
)
def test_a_signal_to_torchrun_alone_stops_its_ranks_and_names_the_newest_checkpoint(
    tmp_path, sent, code, stopped
):
    """Was, for `kill -9`: the launcher exited 247 at once, without a word, while both ranks
    (orphaned) trained and saved on into the run dir, whose lock had gone with the launcher;
    for `kill -INT`: exit 130 without a word."""
    run_dir = tmp_path / "run"
    with _run_at_step(tmp_path, 2) as (launcher, run, log):
        torchrun = next(pid for pid in run if "-m cli.torchrun " in _command_line(pid))
        os.kill(torchrun, sent)
        launcher.wait(timeout=30)
        assert _still_running(run) == []  # by the time the launcher (and its lock) is gone
        _assert_nothing_written(run_dir, seconds=2)
        assert launcher.returncode == code
        said, expected = _said(log, run_dir, stopped)
        assert said == expected, log.read_text()[-2000:]


def test_sigint_to_the_launcher_alone_stops_the_ranks_at_once(tmp_path):
    """`kill -INT PID` of the launcher (a supervisor, `timeout -s INT`), not of its process
    group as a terminal's Ctrl-C. Was: the ranks trained on for a minute, then torchrun was
    killed and the ranks trained on without it, past the checkpoint the line named."""
    run_dir = tmp_path / "run"
    with _run_at_step(tmp_path, 2) as (launcher, run, log):
        launcher.send_signal(signal.SIGINT)
        launcher.wait(timeout=20)
        assert _still_running(run) == []
        _assert_nothing_written(run_dir, seconds=2)
        assert launcher.returncode == 130, log.read_text()[-2000:]
        said, expected = _said(log, run_dir, "interrupted")
        assert said == expected, log.read_text()[-2000:]
        assert not list(run_dir.glob("*.tmp"))  # the ranks stopped where it is safe to


def test_a_run_that_ends_well_despite_a_ctrl_c_is_not_called_interrupted():
    """Was: a run whose ranks finished every step while the launcher waited on them after a
    SIGINT exited 130 "interrupted", below their line saying it finished. (torchrun here is
    a process that ignores SIGINT and ends well a moment later.)"""
    from cli.launch import run_ranks

    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
    ctrl_c = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    try:
        ctrl_c.start()
        started = time.monotonic()
        ignores_it = functools.partial(signal.signal, signal.SIGINT, signal.SIG_IGN)
        try:
            ended: int | str = run_ranks(["sleep", "1.5"], preexec_fn=ignores_it)
        except KeyboardInterrupt:
            ended = "interrupted"
        assert ended == 0
        assert time.monotonic() - started > 1
    finally:
        ctrl_c.cancel()
        signal.signal(signal.SIGINT, inherited)
