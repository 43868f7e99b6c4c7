"""Run mfsdp in a fresh interpreter where packages cannot be imported: a None entry in
sys.modules makes Python's own import machinery raise ImportError for it, as it would where
an optional extra was never installed."""

from __future__ import annotations

import subprocess
import sys

from tests.support.paths import REPO, repo_env

MAIN_WITHOUT = """
import sys
for name in filter(None, sys.argv[1].split(",")):
    sys.modules[name] = None  # `import NAME` now raises ImportError
sys.argv = ['mfsdp', *sys.argv[2:]]
from cli.main import main
main()
"""


def mfsdp_without(packages: str | tuple[str, ...], *args: str) -> subprocess.CompletedProcess:
    """`mfsdp ARGS`, run from the repository root, where `packages` (one name, or several)
    cannot be imported (stdout, stderr as text)."""
    hidden = ",".join((packages,) if isinstance(packages, str) else packages)
    return subprocess.run(
        [sys.executable, "-c", MAIN_WITHOUT, hidden, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=repo_env(),
    )
