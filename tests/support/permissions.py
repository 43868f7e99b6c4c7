"""Running a command as a user whom mode 000 denies, even when the tests run as root."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO, repo_env


def without_root_overrides() -> list[str]:
    """A command prefix under which mode 000 denies this user: none needed unless root,
    whose DAC-override capabilities setpriv drops from the bounding set."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("root without setpriv: mode 000 cannot deny a read here")
    return [setpriv, "--bounding-set", "-dac_override,-dac_read_search"]


# Runs CLI argument lists in one process (under `without_root_overrides`), one JSON record
# per list: a process per case would spend the test's time importing torch.
_RUN_CASES = r"""
import json, sys
from click.testing import CliRunner
from cli.main import app
records = []
for args in json.loads(sys.argv[1]):
    result = CliRunner().invoke(app, args)
    escaped = None if isinstance(result.exception, (SystemExit, type(None))) else result.exception
    records.append({"exit": result.exit_code, "stdout": result.stdout, "stderr": result.stderr,
                    "escaped": repr(escaped) if escaped else None})
print(json.dumps(records))
"""


def run_cli_denied(cases: list[list[str]], unreadable: Path | None = None) -> list[dict]:
    """Run `mfsdp ARGS` for each argument list, as a user whom mode 000 (and 0o555) denies:
    {exit, stdout, stderr, escaped (an exception the command let through)} per list. With
    `unreadable`, that file or directory has mode 000 while they run (its mode is restored)."""
    command = [*without_root_overrides(), sys.executable, "-c", _RUN_CASES, json.dumps(cases)]
    mode = unreadable.stat().st_mode if unreadable is not None else None
    if unreadable is not None:
        unreadable.chmod(0)
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=300,
            env={**repo_env(), "OMP_NUM_THREADS": "1"},
            cwd=REPO,
        )
    finally:
        if unreadable is not None:
            unreadable.chmod(mode)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
