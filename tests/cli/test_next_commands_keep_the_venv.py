"""The commands `./dev demo` and `./dev mfsdp` name next (`next: ./dev mfsdp ckpt inspect
...`) run in the venv the command ran in: where MFSDP_VENV chose it, they carry it. Pasted
without it, such a line built a second `.venv` with another Python and installed everything
again (minutes, GBs), and the user's choice of venv and Python was lost."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from mfsdp_ckpt.command_as_run import DEV_SCRIPT, DEV_VENV, mfsdp_command
from tests.support.paths import REPO

# A venv's python that installs nothing, and an mfsdp that names its next command as the
# real one does (this interpreter, the repository's code)
PYTHON = """#!/bin/sh
case "$*" in *"import torch"*) exit 1;; esac
exit 0
"""
MFSDP = f"""#!/bin/sh
PYTHONPATH={shlex.quote(str(REPO))} exec {shlex.quote(sys.executable)} -c '
from mfsdp_ckpt.command_as_run import mfsdp_command
print(mfsdp_command("ckpt inspect", "runs/demo/sft"))'
"""


@pytest.fixture
def venv(tmp_path) -> Path:
    venv = tmp_path / "my venv"
    (venv / "bin").mkdir(parents=True)
    for name, text in (("python", PYTHON), ("mfsdp", MFSDP)):
        (venv / "bin" / name).write_text(text)
        (venv / "bin" / name).chmod(0o755)
    return venv


@pytest.mark.parametrize("given", ["absolute", "relative"])
def test_dev_names_the_next_command_in_the_venv_it_ran(venv, given):
    env = {**os.environ, "MFSDP_SKIP_VLLM": "1"}
    env["MFSDP_VENV"] = str(venv) if given == "absolute" else venv.name
    for name in (DEV_SCRIPT, DEV_VENV):
        env.pop(name, None)
    done = subprocess.run(
        [str(REPO / "dev"), "mfsdp", "ckpt", "inspect", "runs/demo/sft"],
        cwd=venv.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    said = [line for line in done.stdout.splitlines() if not line.startswith("[dev]")]
    venv_word = shlex.quote(str(venv))
    assert said == [f"`MFSDP_VENV={venv_word} {REPO / 'dev'} mfsdp ckpt inspect runs/demo/sft`"]


def test_without_a_chosen_venv_the_command_is_dev_alone(monkeypatch):
    monkeypatch.setenv(DEV_SCRIPT, "./dev")
    monkeypatch.delenv(DEV_VENV, raising=False)
    assert mfsdp_command("demo", "--out", Path("x y")) == "`./dev demo --out 'x y'`"


def test_the_demo_keeps_the_venv_too(monkeypatch):
    monkeypatch.setenv(DEV_SCRIPT, "../repo/dev")
    monkeypatch.setenv(DEV_VENV, "/scratch/venv312")
    assert mfsdp_command("demo") == "`MFSDP_VENV=/scratch/venv312 ../repo/dev demo`"
