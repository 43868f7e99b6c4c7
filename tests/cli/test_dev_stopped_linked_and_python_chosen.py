"""`./dev` on a first machine: a Ctrl-C ends it, whichever step it is at; a venv whose
creation was stopped is removed (or, left by a harder kill, named in one line); run through a
link it works in the repository the link points to; and a PYTHON the existing venv does not
have is said, not silently ignored.

A Ctrl-C while `python -m venv` ran left a venv without pip (every later call: "No module
named pip"); one during the torch step was taken by pip as a failed download, and setup went
on to install torch from the configured index, the project and vLLM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO

# A venv's python that records what setup runs and installs nothing: torch is there (exit 0),
# or it is not (1) and its install waits as pip does and, as pip does on SIGINT, exits 1.
STUB = """#!/bin/sh
case "$*" in
  *"import torch"*) exit {torch};;
  *"find_spec('vllm')"*) exit 1;;
  *"sys.version_info[:3]"*) echo "{version}"; exit 0;;
  *"index-url"*) echo "STUB waits"; trap 'exit 1' INT; sleep 30; exit 1;;
esac
echo "STUB $*"
exit 0
"""


def _stub_venv(tmp_path: Path, version: str = "3.9.0", torch: int = 0) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(STUB.format(version=version, torch=torch))
    (venv / "bin" / "python").chmod(0o755)
    return venv


def _env(venv: Path, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "PYENV_VERSION")}
    return {**env, "MFSDP_VENV": str(venv), "MFSDP_SKIP_VLLM": "1", **more}


def _stopped_at(line: str, args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """Run `dev ARGS`, and once it prints `line`, Ctrl-C it as a terminal does (SIGINT to
    its process group): its exit code, stdout and stderr."""
    dev = subprocess.Popen(
        [str(REPO / "dev"), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert dev.stdout is not None and dev.stderr is not None
    seen = []
    for said in dev.stdout:
        seen.append(said)
        if said.startswith(line):
            os.killpg(dev.pid, signal.SIGINT)
            break
    out = "".join(seen) + dev.stdout.read()
    return dev.wait(timeout=60), out, dev.stderr.read()


def test_a_ctrl_c_in_the_torch_step_ends_setup(tmp_path):
    venv = _stub_venv(tmp_path, torch=1)
    code, out, err = _stopped_at("STUB waits", ["setup"], _env(venv))
    assert code == 130, out + err
    assert "cannot be reached" not in out and "installing mfsdp" not in out
    assert not (venv / ".mfsdp-installed").exists()


def test_a_venv_stopped_while_created_is_removed(tmp_path):
    venv = tmp_path / "venv"
    env = _env(venv, PYTHON=sys.executable)
    code, out, err = _stopped_at("[dev] creating", ["setup"], env)
    assert code == 130, out + err
    assert not venv.exists()
    assert "Traceback" not in err


def test_a_venv_without_pip_is_named_in_one_line(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    done = subprocess.run(
        [str(REPO / "dev"), "setup"], env=_env(venv), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == (
        f"[dev] {venv}: a venv without pip (its creation was stopped before it ended?); remove"
        f" it with `rm -rf {venv}`, then run the same command again\n"
    )


def test_dev_through_a_link_works_in_the_repository(tmp_path):
    """Run as `bin/dev` (a link, a path from the caller's directory): set up in the
    repository, and its usage read from the script itself."""
    venv = _stub_venv(tmp_path)
    (venv / ".mfsdp-skip-vllm").touch()
    links = tmp_path / "bin"
    links.mkdir()
    (links / "dev").symlink_to(REPO / "dev")
    done = subprocess.run(
        [str(links / "dev"), "setup"],
        env=_env(venv, MFSDP_SKIP_VLLM=""),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stderr == ""
    assert "STUB -W ignore:Editable installation -m pip install -q -e" in done.stdout
    assert sorted(p.name for p in links.iterdir()) == ["dev"]
    usage = subprocess.run(  # read from the script, not from the path given, once moved
        ["bin/dev", "help"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert usage.returncode == 0 and "./dev setup" in usage.stdout, usage.stderr


def test_a_python_chosen_for_an_existing_venv_is_said_in_one_line(tmp_path):
    venv = _stub_venv(tmp_path, version="3.9.0")
    env = _env(venv, PYTHON=sys.executable)
    done = subprocess.run(
        [str(REPO / "dev"), "setup"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == (
        f"[dev] {venv} has Python 3.9.0: PYTHON={sys.executable} applies when the venv is"
        f" created (`rm -rf {venv}`, then the same command, makes one with it)\n"
    )
    same = _stub_venv(tmp_path / "same", version=".".join(map(str, sys.version_info[:3])))
    done = subprocess.run(
        [str(REPO / "dev"), "setup"],
        env=_env(same, PYTHON=sys.executable),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stderr == ""
