"""Ctrl-C or SIGTERM while `mfsdp` is still importing its command line (the first
0.1-0.3 s) ends it as one stopped later does: one `error:` line, with --json one JSON
object on stdout, exit 130 or 143. Was a KeyboardInterrupt traceback and an empty stdout,
or for SIGTERM a silent exit -15; SIGHUP, SIGQUIT and SIGUSR1 likewise end it as SIGTERM
does (they ended it at once, with no line)."""

import json
import signal
import subprocess
import sys

import pytest

from tests.support.paths import REPO, repo_env

# The console script's two lines, run once an import finder holds the import of click
# (the first heavy import, and where the signal lands) until the test has signalled.
START = """
import sys, time
class Held:
    def find_spec(self, name, path=None, target=None):
        if name == "click":
            print("importing click", file=sys.stderr, flush=True)
            time.sleep(60)
sys.meta_path.insert(0, Held())
sys.argv = ["mfsdp", "ckpt", "export-hf", "run", "--out", "out", "--json"]
from cli.main import main
main()
"""


@pytest.mark.parametrize(
    "sent, code, error",
    [
        (signal.SIGINT, 130, "interrupted"),
        (signal.SIGTERM, 143, "SIGTERM: interrupted"),
        (signal.SIGHUP, 129, "SIGHUP: interrupted"),
        (signal.SIGQUIT, 131, "SIGQUIT: interrupted"),
        (signal.SIGUSR1, 138, "SIGUSR1: interrupted"),
    ],
)
def test_a_signal_during_the_imports_is_one_line_and_json(tmp_path, sent, code, error):
    process = subprocess.Popen(
        [sys.executable, "-c", START],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=repo_env(),
        cwd=tmp_path,
        preexec_fn=lambda: signal.signal(sent, signal.SIG_DFL),  # as in a terminal
    )
    assert process.stderr is not None
    assert process.stderr.readline() == "importing click\n"
    process.send_signal(sent)
    out, err = process.communicate(timeout=60)
    assert process.returncode == code, err
    assert json.loads(out) == {"error": error, "exit_code": code}
    assert err == f"error: {error}\n"


def test_python_dash_m_cli_main_runs_the_command():
    """`python -m cli.main ckpt validate /nonexistent --json` printed nothing and exited 0."""
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "ckpt", "validate", "/nonexistent", "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and json.loads(done.stdout)["exit_code"] == 2, done


def test_a_signal_started_ignored_stays_ignored(tmp_path):
    """`nohup mfsdp ...` (SIGHUP ignored from the start) is not ended by a closed terminal's
    SIGHUP: mfsdp handles only the stop signals whose action it was started with at their
    default. SIGUSR1, left at its default, is handled."""
    process = subprocess.Popen(
        [sys.executable, "-c", START],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=repo_env(),
        cwd=tmp_path,
        preexec_fn=lambda: (
            signal.signal(signal.SIGHUP, signal.SIG_IGN),
            signal.signal(signal.SIGUSR1, signal.SIG_DFL),
        ),
    )
    assert process.stderr is not None
    assert process.stderr.readline() == "importing click\n"
    ignored, caught = _signal_masks(process.pid)
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=60)
    assert ignored & (1 << (signal.SIGHUP - 1)), "SIGHUP is no longer ignored"
    assert caught & (1 << (signal.SIGUSR1 - 1)), "SIGUSR1 is not handled"
    assert process.returncode == 143


def _signal_masks(pid: int) -> tuple[int, int]:
    """The signals process `pid` ignores and those it handles, as bit masks (/proc)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        fields = dict(line.split(":", 1) for line in handle if ":" in line)
    return int(fields["SigIgn"], 16), int(fields["SigCgt"], 16)
