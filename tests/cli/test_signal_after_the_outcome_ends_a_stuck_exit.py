"""Once a command's outcome is decided, a Ctrl-C or SIGTERM leaves its exit status alone but
still ends a process whose exit is stuck, a bounded time later; and a process forked after
that point (a pool re-forking its workers) can be ended by SIGTERM.

Was: both signals were ignored from that point until the exit, and inherited as ignored by
every process forked after it: an exit that waited on what user code left running never
came, and neither `kill` nor Ctrl-C ended it; `Pool.terminate()` could not end its workers.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from tests.support.paths import REPO, repo_env

# A process that ends with its command, whose outcome (exit 5) is decided, held at exit by
# a thread that never ends; a child it forks afterwards sleeps until ended.
_STUCK_AT_EXIT = """
import multiprocessing, threading, time
import cli.main
cli.main.LATE_SIGNAL_GRACE_S = 1.0
cli.main.command_ends_process()
cli.main.hold_signals(5)
child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(600,))
child.start()
child.terminate()
child.join(10)
print(child.exitcode, flush=True)
threading.Thread(target=threading.Event().wait).start()
"""


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT])
def test_a_late_signal_ends_a_stuck_exit_with_the_decided_status(number):
    process = subprocess.Popen(
        [sys.executable, "-c", _STUCK_AT_EXIT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=repo_env(),
        cwd=REPO,
    )
    assert process.stdout is not None
    # SIGTERM ended the child forked after the outcome was decided
    assert process.stdout.readline().strip() == str(-signal.SIGTERM)
    time.sleep(0.5)  # the main thread has returned: the exit waits on the thread
    assert process.poll() is None
    started = time.monotonic()
    process.send_signal(number)
    try:
        _, err = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    assert process.returncode == 5, err
    assert time.monotonic() - started >= 0.9  # the exit was given its grace first
    assert "Traceback" not in err
