"""A relative MFSDP_VENV or PYTHON given to `./dev` is read from the caller's directory, as
every path `./dev` is given (the README: "from any directory: paths are read from where you
run it"). Both were read from the repository: `MFSDP_VENV=clone/.venv clone/dev setup`
started a fresh venv and its install in clone/clone/.venv instead of using ./clone/.venv.

The Pythons here are scripts that make a venv of themselves and install nothing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.support.paths import REPO

# `-m venv DIR` makes DIR a venv of this script, saying which script made it; the rest of
# setup (pip, torch's import) succeeds without doing anything, torch found missing
PYTHON = """#!/bin/sh
case "$*" in
  "-m venv "*) mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && echo "$0" >"$3/made-by" ;;
  *"import torch"*) exit 1 ;;
esac
exit 0
"""
MFSDP = """#!/bin/sh
echo "mfsdp of $0"
"""


def _script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def _dev(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(REPO / "dev"), *args],
        cwd=cwd,
        env={**os.environ, "MFSDP_SKIP_VLLM": "1", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_relative_mfsdp_venv_is_the_callers(tmp_path):
    venv = tmp_path / "callers-venv"
    _script(venv / "bin" / "python", PYTHON)
    mfsdp = _script(venv / "bin" / "mfsdp", MFSDP)
    maker = _script(tmp_path / "maker" / "python3", PYTHON)  # were a venv made, it is a fake
    done = _dev(tmp_path, "mfsdp", "--version", MFSDP_VENV=venv.name, PYTHON=str(maker))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == f"mfsdp of {mfsdp}"
    assert f"[dev] installing dependencies into {venv}\n" in done.stdout
    assert not (venv / "made-by").exists() and not (REPO / venv.name).exists()


def test_a_relative_python_makes_the_venv_asked_for_where_the_caller_is(tmp_path):
    python = _script(tmp_path / "pythons" / "python3", PYTHON)
    venv = tmp_path / "callers-new-venv"
    done = _dev(tmp_path, "setup", MFSDP_VENV=venv.name, PYTHON="pythons/python3")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"[dev] creating {venv} with "
    assert (venv / "made-by").read_text() == f"{python}\n"
    assert done.stdout.splitlines()[-1].startswith(f"[dev] {venv} is set up: ")
    assert not (REPO / venv.name).exists() and not (REPO / "pythons").exists()
