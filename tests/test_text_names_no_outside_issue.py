"""Comments, docstrings and docs describe a problem in place: an issue named by its number
alone pointed at an issue list this repository does not have, so a reader could not tell
what it meant."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.paths import REPO

TEXT = {".py", ".md", ".toml", ".yaml", ".yml", ".sh", ".txt", ".cfg"}
SKIPPED = {"fixtures", "__pycache__", "mfsdp.egg-info"}  # and hidden folders (.venv, .git)
# the word, then a number (with or without "#"): no repository or address beside it
NUMBERED_ISSUE = re.compile(r"\bissue\s+#?[0-9]+", re.IGNORECASE)


def _text_files() -> list[Path]:
    return [
        path
        for path in REPO.rglob("*")
        if path.suffix in TEXT
        and path.is_file()
        and not any(
            part in SKIPPED or part.startswith(".") for part in path.relative_to(REPO).parts
        )
    ]


def test_no_text_names_an_issue_by_number_alone():
    found = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in _text_files()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if NUMBERED_ISSUE.search(line)
    ]
    assert found == []
