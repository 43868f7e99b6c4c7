"""The tree passes its lint, format and type checks, so CI (`./dev test`) enforces them.

The rules live in pyproject.toml: `[tool.ruff]` (rule set, 100 columns) and `[tool.mypy]`
(`mfsdp_ckpt/` and `cli/`). Each test fails with the tool's own findings; run them alone
with `./dev test tests/test_code_quality.py`, fix with `.venv/bin/ruff format FILES` and
`.venv/bin/ruff check --fix FILES`.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support.paths import REPO


def _tool(*args: str) -> None:
    """Run `python -m TOOL ARGS` at the repository root; fail with its output unless exit 0."""
    done = subprocess.run(
        [sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"`{' '.join(args)}` exit {done.returncode}:\n" + (
        done.stdout + done.stderr
    )


def test_ruff_lint_is_clean():
    _tool("ruff", "check", "--no-cache", ".")


def test_ruff_format_is_clean():
    _tool("ruff", "format", "--check", "--no-cache", ".")


@pytest.mark.slow
def test_mypy_is_clean():
    # The cache sits outside the tree, one per checkout: a cold run also analyzes the torch
    # and transformers code the checked modules import; a warm one rechecks what changed.
    checkout = hashlib.sha256(str(REPO).encode()).hexdigest()[:12]
    cache = Path(tempfile.gettempdir()) / f"mfsdp-mypy-cache-{checkout}"
    _tool("mypy", "--cache-dir", str(cache))
