"""Where the repository and the committed fixtures are, for tests in any folder: one place,
so moving a test file never changes what `REPO` means."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
EXAMPLES = REPO / "examples"


def repo_env() -> dict[str, str]:
    """This process's environment with the repository first on PYTHONPATH, for a subprocess
    that runs the project's (or the tests') modules with `python -m`."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
