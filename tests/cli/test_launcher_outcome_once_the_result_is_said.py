"""Once rank 0 of `mfsdp train --nproc-per-node N` printed the run's result, the launching
mfsdp's outcome is that result: exit 0, however torchrun ended and whatever signal came.

Was: only torchrun's exit code told the launcher; a SIGTERM to the launcher just after the
result line, with torchrun then ending otherwise than 0 (stopped by the launcher's passing
the signal on as it exited), gave the result line, then `error: SIGTERM: interrupted after
training finished ...` and exit 143. Here a stand-in for torchrun prints the result as rank 0
does (`mark_result_said`), sends the launcher SIGTERM and is stopped by the signal the
launcher passes on: the launcher must exit 0 with nothing more said.
"""

from __future__ import annotations

import subprocess
import sys

from tests.support.paths import repo_env

# torchrun's stand-in: rank 0's result and its mark, then a SIGTERM to the launcher, whose
# passing it on ends this process by the signal (not 0)
_TORCHRUN = (
    "import os, signal, time\n"
    "from cli.result_said import mark_result_said\n"
    "print('sft: step 1, loss 1.0', flush=True)\n"
    "mark_result_said()\n"
    "os.kill(os.getppid(), signal.SIGTERM)\n"
    "time.sleep(60)\n"
)

# the launching mfsdp of `mfsdp train`: SIGTERM raises Terminated, as in `cli.main`
_LAUNCHER = (
    "import signal, sys\n"
    "from cli.launch import end_as_ranks_ended, run_ranks\n"
    "from cli.main import command_ends_process\n"
    "from cli.stop import terminate\n"
    "command_ends_process()\n"
    "signal.signal(signal.SIGTERM, terminate)\n"
    f"code = run_ranks([sys.executable, '-c', {_TORCHRUN!r}])\n"
    "end_as_ranks_ended(code, lambda stopped: 'interrupted: ' + stopped)\n"
    "print('launcher: exit 0', file=sys.stderr)\n"
)


def test_a_signal_after_the_result_leaves_the_launcher_exit_0():
    ended = subprocess.run(
        [sys.executable, "-c", _LAUNCHER],
        capture_output=True,
        text=True,
        env=repo_env(),
        timeout=120,
    )
    assert ended.returncode == 0, (ended.returncode, ended.stdout, ended.stderr)
    assert ended.stdout == "sft: step 1, loss 1.0\n", ended.stdout
    assert ended.stderr == "launcher: exit 0\n", ended.stderr


def test_a_signal_before_the_result_still_stops_the_launcher():
    before = _TORCHRUN.replace("mark_result_said()\n", "")
    launcher = _LAUNCHER.replace(repr(_TORCHRUN), repr(before))
    ended = subprocess.run(
        [sys.executable, "-c", launcher],
        capture_output=True,
        text=True,
        env=repo_env(),
        timeout=120,
    )
    assert ended.returncode != 0, (ended.stdout, ended.stderr)
    assert "launcher: exit 0" not in ended.stderr, ended.stderr
