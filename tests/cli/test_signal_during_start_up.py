"""Ctrl-C or SIGTERM while `mfsdp` is still importing its command line (the first
0.1-0.3 s) ends it as one stopped later does: one `error:` line, with --json one JSON
object on stdout, exit 130 or 143. Was a KeyboardInterrupt traceback and an empty stdout,
or for SIGTERM a silent exit -15."""

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
