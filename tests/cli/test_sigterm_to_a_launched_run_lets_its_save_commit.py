"""SIGTERM to the `mfsdp` that launched `--nproc-per-node 2` (`kill PID`, a scheduler's stop)
ends the run as Ctrl-C does: an asynchronous save in flight commits before the ranks exit,
one line names the signal and the checkpoint, exit 143, and no process of the run is left.
torchrun passed the SIGTERM on to the ranks as it came, and a rank, which keeps SIGTERM's
default (torchrun also stops the ranks left after one failed with it), was killed mid-save:
its `global_step_N.tmp/` stayed in the run dir. A SIGTERM to torchrun alone ends the same way
(it was said as a Ctrl-C, exit 130).

SIGHUP (a closed terminal or ssh session), SIGQUIT (Ctrl-\\) and SIGUSR1 (Slurm's
`--signal=USR1@T`) end a run as SIGTERM does, with 128 + their number: sent to the process
group they killed every process mid-save (a `.tmp` left, no line, or "interrupted" with
130 for SIGQUIT); sent to the launcher alone (an ssh session lost) it exited at once with no
line and left the run dir's lock file naming its dead pid; a single process (no torchrun)
died of them as well."""

from __future__ import annotations

import contextlib
import os
import signal

import pytest

from mfsdp_ckpt.format import run_steps
from mfsdp_ckpt.storage.out_lock import lock_path_for
from tests.support.cli_errors import error_prefixed_lines
from tests.support.launched_sft import step_reached, train_until_stopped
from tests.support.metrics import read_metrics
from tests.support.waiting import wait_until

HELD = "MFSDP_TEST_HELD_SAVES"  # read by the sitecustomize below, in the ranks alone
ALONE = "MFSDP_TEST_HELD_ALONE"  # ... and in a run of one process (no RANK) too
HOLD_SECONDS = 3.0  # how long each rank's background save waits before it goes on
# In each rank: a background (async) save leaves a mark named RANK.STEP in the folder HELD
# names, then waits HOLD_SECONDS before writing its files, so a signal comes while it is
# in flight.
SITECUSTOMIZE = f"""import os
if os.environ.get({HELD!r}) and ("RANK" in os.environ or os.environ.get({ALONE!r})):
    import threading, time
    from mfsdp_ckpt.checkpointer import Checkpointer
    _write = Checkpointer._write
    def _held_write(self, state_dict, writer, pending):
        if threading.current_thread() is not threading.main_thread():
            rank = os.environ.get("RANK", "0")
            mark = os.path.join(os.environ[{HELD!r}], f"{{rank}}.{{pending.step}}")
            open(mark, "w").close()
            time.sleep({HOLD_SECONDS})
        _write(self, state_dict, writer, pending)
    Checkpointer._write = _held_write
"""


def _to_the_launcher(number):
    return lambda launcher, _torchrun: os.kill(launcher, number)


def _to_the_group(number):
    return lambda launcher, _torchrun: os.killpg(launcher, number)


# One launch (half a minute each) per path a stop signal takes through the run. SIGTERM,
# SIGHUP, SIGQUIT and SIGUSR1 share every handler on it (`cli.stop_signals.stop` in the
# launcher, `cli.torchrun._stop_once` in torchrun, `cli.errors._watch_for_ctrl_c` in a
# rank): one of them per path stands for all four; the line and exit code each signal's
# number gives are checked for every one of them in tests/cli/test_signal_during_start_up.py.
@pytest.mark.parametrize(
    "stop, code, said, nproc",
    [
        # the launcher alone: it passes the signal on to torchrun, which sends the ranks SIGINT
        (_to_the_launcher(signal.SIGTERM), 143, "SIGTERM: ", 2),
        # torchrun alone: its agent stops the ranks, the launcher names the signal it exited of
        (lambda _launcher, torchrun: os.kill(torchrun, signal.SIGTERM), 143, "SIGTERM: ", 2),
        # the whole group, SIGINT: KeyboardInterrupt in the launcher and in each rank
        (_to_the_group(signal.SIGINT), 130, "", 2),  # Ctrl-C
        # the whole group, a stop signal: each process gets it, torchrun twice (`_stop_once`),
        # and a rank's handler of SIGHUP, SIGQUIT and SIGUSR1 (not SIGTERM's default) runs
        (_to_the_group(signal.SIGHUP), 129, "SIGHUP: ", 2),
        # a single process, no torchrun: `Terminated` raised in the training process itself
        (_to_the_launcher(signal.SIGUSR1), 138, "SIGUSR1: ", 1),
    ],
    ids=[
        "sigterm-to-the-launcher",
        "sigterm-to-torchrun-alone",
        "ctrl-c",
        "sighup-to-the-group",
        "sigusr1-to-one-process",
    ],
)
def test_a_signal_lets_an_async_save_in_flight_commit(
    tmp_path, monkeypatch, stop, code, said, nproc
):
    """Ctrl-C too: a Ctrl-C landing in the wait for the save in flight (Python's
    `Thread.join`) marked its thread as ended, and the rank exited mid-save."""
    from cli.torchrun import run_processes

    site, held = tmp_path / "site", tmp_path / "held"
    site.mkdir()
    held.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    monkeypatch.setenv(HELD, str(held))
    if nproc == 1:
        monkeypatch.setenv(ALONE, "1")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    )
    with _as_in_a_terminal():
        process = train_until_stopped(
            tmp_path,
            "checkpoint.save_every=1",
            "checkpoint.async_save=true",
            "trainer.log_every=1",
            nproc=nproc,
        )
    # every rank's save of step 2 is in flight (a rank the signal reached before its own
    # save began cannot join the others' collectives: theirs is then cut short)
    step_2 = [held / f"{rank}.2" for rank in range(nproc)]
    wait_until(
        lambda: all(mark.exists() for mark in step_2),
        240,
        lambda: f"{step_2} never all appeared",
        process,
    )
    torchrun, launch_id = _torchrun_of(process.pid) if nproc > 1 else (0, "")
    stop(process.pid, torchrun)
    _out, stderr = process.communicate(timeout=120)
    run = tmp_path / "run"
    assert process.returncode == code, stderr
    assert sorted(p.name for p in run.iterdir() if p.name.endswith(".tmp")) == [], stderr
    newest = run_steps.read_tracker(run)
    assert newest is not None and newest >= 2, stderr  # the save in flight committed
    assert run_steps.list_complete_steps(run)[-1] == newest
    reached = max(record["step"] for record in read_metrics(run))
    assert error_prefixed_lines(stderr) == [
        f"error: {said}interrupted{step_reached(run, reached, newest, 1)}; the newest checkpoint is"
        f" {run}/global_step_{newest}: run the same command again to resume from it"
    ], stderr
    assert not lock_path_for(run).exists(), stderr  # the lock went with the command
    if launch_id:
        assert run_processes(launch_id) == [], "a process of the run outlived the command"


@contextlib.contextmanager
def _as_in_a_terminal():
    """The stop signals a process started in the block has at their default action, as from a
    terminal, whatever this test runner was started ignoring (a background job of a script
    ignores SIGQUIT, `nohup` SIGHUP: mfsdp leaves such a signal ignored)."""
    numbers = (signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1)
    ignored = [number for number in numbers if signal.getsignal(number) == signal.SIG_IGN]
    for number in ignored:
        signal.signal(number, signal.SIG_DFL)
    try:
        yield
    finally:
        for number in ignored:
            signal.signal(number, signal.SIG_IGN)


def _torchrun_of(launcher: int) -> tuple[int, str]:
    """The pid of the torchrun `launcher` started and the LAUNCH_ID it gave it (cli/launch.py
    `run_ranks`), read from torchrun's environment: the mark every process of the run
    carries."""
    from cli.torchrun import LAUNCH_ID

    mark = f"{LAUNCH_ID}=".encode()
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
            if int(stat[stat.rindex(b")") + 2 :].split()[1]) != launcher:
                continue
            with open(f"/proc/{entry}/environ", "rb") as handle:
                names = handle.read().split(b"\0")
        except OSError:
            continue
        for name in names:
            if name.startswith(mark):
                return int(entry), name[len(mark) :].decode()
    raise AssertionError(f"no child of pid {launcher} carries {LAUNCH_ID}")
