"""`./dev test PATH` reads PATH from the caller's directory, as `./dev mfsdp` reads its paths
(the README: "from any directory: paths are read from where you run it"), and `./dev test`
alone still runs the whole suite from the repository. It read PATH from the repository:
`clone/dev test clone/tests/cli/x.py` said `ERROR: file or directory not found`.

`./dev demo` and `./dev mfsdp` tell the demo how it was started (`MFSDP_DEV`, ./dev as its
caller ran it), so that the commands it names run as typed: `mfsdp` is not on PATH then."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import REPO

# A venv's python and mfsdp that say where they ran, with what, and install nothing
PYTHON = """#!/bin/sh
case "$*" in *"import torch"*) exit 1;; *pytest*) echo "PWD=$PWD"; echo "ARGS $*";; esac
exit 0
"""
MFSDP = """#!/bin/sh
echo "PWD=$PWD MFSDP_DEV=$MFSDP_DEV ARGS $*"
"""
PYTEST = "ARGS -m pytest -q -n auto --maxprocesses 4 --dist loadfile"


@pytest.fixture
def venv(tmp_path) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    for name, text in (("python", PYTHON), ("mfsdp", MFSDP)):
        (venv / "bin" / name).write_text(text)
        (venv / "bin" / name).chmod(0o755)
    return venv


def _typed(cwd: Path) -> str:
    """./dev as a user in `cwd` runs it: `./dev` in the repository, `../dev` below it."""
    relative = os.path.relpath(REPO / "dev", cwd)
    return relative if "/" in relative else f"./{relative}"


def _dev(venv: Path, cwd: Path, *args: str) -> list[str]:
    env = {**os.environ, "MFSDP_VENV": str(venv), "MFSDP_SKIP_VLLM": "1"}
    env.pop("MFSDP_DEV", None)
    done = subprocess.run(
        [_typed(cwd), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if not line.startswith("[dev]")]


def test_test_paths_are_read_from_the_callers_directory(venv):
    here = REPO / "tests"
    node = "cli/test_dev_unknown_command.py::test_x"
    said = _dev(venv, here, "test", "-n", "0", node, "-k", "cli", "cli", "nothere/test_y.py")
    # `-k cli`: an expression, though tests/cli is a folder there; `cli` alone: that folder
    assert said == [
        f"PWD={REPO}",
        f"{PYTEST} -n 0 {here}/{node} -k cli {here}/cli {here}/nothere/test_y.py",
    ]


@pytest.mark.parametrize("where", ["repository", "elsewhere"])
def test_test_alone_runs_the_whole_suite_from_the_repository(venv, tmp_path, where):
    cwd = REPO if where == "repository" else tmp_path
    assert _dev(venv, cwd, "test") == [f"PWD={REPO}", PYTEST]


def test_test_paths_given_in_the_repository_go_to_pytest_as_given(venv):
    assert _dev(venv, REPO, "test", "tests/cli", "-x") == [f"PWD={REPO}", f"{PYTEST} tests/cli -x"]


@pytest.mark.parametrize("command", ["demo", "mfsdp"])
def test_the_demo_is_told_how_dev_was_run(venv, tmp_path, command):
    said = _dev(venv, tmp_path, command, "--help")
    args = "demo --help" if command == "demo" else "--help"
    assert said == [f"PWD={tmp_path} MFSDP_DEV={_typed(tmp_path)} ARGS {args}"]
