"""A Ctrl-C or SIGTERM that arrives once a command printed its result (or its error) leaves
the exit status the command's: it is ignored until the process exits.

Was: the entry point restored Python's default SIGTERM before interpreter shutdown (which
takes a while with torch loaded), so `kill` right after an export printed its JSON ended
the process with -15 and no line, the export published; a late Ctrl-C likewise. Here the
process is held at exit (an atexit hook sleeps) so that the signal lands there every time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from cli.main import main
from tests.support.paths import REPO, repo_env

# `mfsdp ARGS` as the console script runs it, held for a while after main() returns.
_HELD_AT_EXIT = (
    "import atexit, sys, time\n"
    "atexit.register(time.sleep, 3)\n"
    "sys.argv = ['mfsdp', *sys.argv[1:]]\n"
    "from cli.main import main\n"
    "main()\n"
)


# The same, held instead in the interpreter's finalization, after every exit hook: the
# default action was back for each signal there, and one ended a finished command with -2/-15.
_HELD_IN_FINALIZATION = (
    "import sys, time\n"
    "class HeldWhileFinalized:\n"
    "    def __del__(self):\n"
    "        time.sleep(3)\n"
    "held = HeldWhileFinalized()\n"  # a global of __main__: deleted as modules are finalized
    "sys.argv = ['mfsdp', *sys.argv[1:]]\n"
    "from cli.main import main\n"
    "main()\n"
)


def _signalled_after_output(
    args: list[str], number: int, script: str = _HELD_AT_EXIT
) -> tuple[int, str, str]:
    """Exit status, stdout and stderr of `mfsdp ARGS` run by `script`, sent `number` once
    its output ended."""
    process = subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**repo_env(), "OMP_NUM_THREADS": "1"},
        cwd=REPO,
    )
    assert process.stdout is not None
    first = _first_line(process.stdout.fileno())  # the output has begun: it ends at once
    time.sleep(0.5)  # and the process waits in its atexit hook for 3 s
    process.send_signal(number)
    out, err = process.communicate(timeout=60)
    return process.returncode, (first + out).decode(), err.decode()


def _first_line(fd: int) -> bytes:
    """The first line written to `fd`, read a byte at a time: `communicate` reads the file
    descriptor itself, so what a buffered readline took past the line (the rest of the
    output, when it came in the same write) was lost to it."""
    line = b""
    while not line.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            break
        line += byte
    return line


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT])
def test_after_a_result_the_exit_status_is_the_commands(number):
    code, out, err = _signalled_after_output(["config", "defaults", "sft"], number)
    assert (code, err) == (0, ""), (code, err)
    assert "\nmodel:\n" in out, out


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_the_interpreters_finalization_leaves_the_status(number):
    args = ["config", "defaults", "sft"]
    code, out, err = _signalled_after_output(args, number, _HELD_IN_FINALIZATION)
    assert (code, err) == (0, ""), (code, err)
    assert "\nmodel:\n" in out, out


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT])
def test_after_an_error_line_the_exit_status_is_the_errors(number, tmp_path):
    args = ["ckpt", "validate", str(tmp_path / "absent"), "--json"]
    code, out, err = _signalled_after_output(args, number)
    assert code == 2, (code, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err  # no traceback, no SIGTERM
    assert "SIGTERM" not in err and "interrupted" not in err, err
    assert out.count('"exit_code": 2') == 1, out


def test_a_command_run_in_process_leaves_signals_working(monkeypatch, capsys):
    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(sys, "argv", ["mfsdp", "config", "defaults", "sft"])
    try:
        main()
    except SystemExit as exit_:
        assert exit_.code in (0, None)
    assert "\nmodel:\n" in capsys.readouterr().out
    assert signal.getsignal(signal.SIGTERM) == before  # not ignored: the caller goes on
    assert signal.getsignal(signal.SIGINT) != signal.SIG_IGN
