"""Where the repository and the committed fixtures are, for tests in any folder: one place,
so moving a test file never changes what `REPO` means."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
EXAMPLES = REPO / "examples"
