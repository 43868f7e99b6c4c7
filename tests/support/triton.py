"""Running Triton kernels on CPU in tests: Triton's interpreter, in a process of its own."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

from tests.support.paths import repo_env

# Triton's wheels (a dependency of CUDA torch, and of the dev extra here) are built for
# Linux x86_64 only; there it must be installed, so these tests never skip for want of it.
needs_triton = pytest.mark.skipif(
    not (sys.platform == "linux" and platform.machine() == "x86_64"),
    reason="Triton ships for Linux x86_64 only",
)


def run_interpreted(module: str, *args: str) -> dict:
    """`python -m module args` with TRITON_INTERPRET=1 (the interpreter is chosen when the
    kernels are defined, so it needs a fresh process); the JSON object it prints last."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        env={**repo_env(), "TRITON_INTERPRET": "1"},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
