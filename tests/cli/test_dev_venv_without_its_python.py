"""`./dev` with a venv whose Python is gone (uninstalled, or upgraded away: its bin/python a
dangling link) says so in one line, naming the venv and that Python, and how to start over,
and leaves the venv as it is. It said "creating VENV with Python 3.12.1", ran `python -m venv`
over the old one and failed with a bare `Error: [Errno 2] No such file or directory:
'VENV/bin/python3'`, on every call, leaving a pyvenv.cfg rewritten for the new Python and a
second lib/pythonX.Y."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import REPO


def _venv_of_a_python_gone(tmp_path: Path, cfg: str | None) -> Path:
    """A venv as `python -m venv` made it, its Python since removed (`cfg`: its pyvenv.cfg)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    if cfg is not None:
        (venv / "pyvenv.cfg").write_text(cfg)
    (venv / "bin" / "python3").symlink_to(tmp_path / "gone" / "bin" / "python3.11")
    (venv / "bin" / "python").symlink_to("python3")
    return venv


def _tree(folder: Path) -> dict[str, str | bytes]:
    """What is in `folder`: each link's target, each file's bytes, each folder."""
    found: dict[str, str | bytes] = {}
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        if path.is_symlink():
            found[name] = f"-> {os.readlink(path)}"
        elif path.is_dir():
            found[name] = "/"
        else:
            found[name] = path.read_bytes()
    return found


@pytest.mark.parametrize(
    ("cfg", "named"),
    [
        pytest.param(  # as Python 3.11 writes it
            "home = {gone}/bin\ninclude-system-site-packages = false\nversion = 3.11.7\n"
            "executable = {gone}/bin/python3.11\ncommand = {gone}/bin/python3.11 -m venv v\n",
            "{gone}/bin/python3.11",
            id="executable",
        ),
        pytest.param(  # an older Python's: its folder only
            "home = {gone}/bin\nversion = 3.10.4\n", "{gone}/bin/python3", id="home-only"
        ),
        pytest.param(None, "{gone}/bin/python3.11", id="no-pyvenv.cfg"),
    ],
)
@pytest.mark.parametrize("command", [["mfsdp", "--version"], ["demo"], ["setup"]])
def test_a_venv_whose_python_is_gone_is_named_and_left_as_it_is(tmp_path, cfg, named, command):
    gone = str(tmp_path / "gone")
    venv = _venv_of_a_python_gone(tmp_path, None if cfg is None else cfg.format(gone=gone))
    before = _tree(venv)
    env = {**os.environ, "MFSDP_VENV": str(venv), "MFSDP_SKIP_VLLM": "1"}
    done = subprocess.run(
        [str(REPO / "dev"), *command], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == (
        f"[dev] {venv}: a venv whose Python {named.format(gone=gone)} is gone; remove it with"
        f" `rm -rf {venv}`, then run the same command again\n"
    )
    assert _tree(venv) == before
