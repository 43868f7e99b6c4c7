"""`ckpt validate --help`: its "Checks:" paragraph wraps to the terminal as the rest of the
help does, and --strict promises only what fails it.

- The paragraph was a verbatim block of 82-86 column lines, past an 80-column terminal and
  never rewrapped on a narrower one.
- --strict said a "stale tracker" fails it; a tracker naming an older complete step is a
  note (a healthy run still saving has one), which --strict passes.
"""

from __future__ import annotations

import os

import pytest

from tests.support.fresh_python import mfsdp


def _help(columns: int) -> list[str]:
    done = mfsdp("ckpt", "validate", "--help", env={**os.environ, "COLUMNS": str(columns)})
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def _checks(lines: list[str]) -> list[str]:
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("Checks:"))
    end = lines.index("", start)
    return lines[start:end]


@pytest.mark.parametrize("columns", [80, 60])
def test_the_checks_paragraph_fits_the_terminal(columns):
    checks = _checks(_help(columns))
    assert len(checks) > 3
    assert max(len(line) for line in checks) <= columns - 1, "\n".join(checks)


def test_strict_promises_no_failure_for_a_stale_tracker():
    from cli.main import app

    validate = app.commands["ckpt"].commands["validate"]  # type: ignore[attr-defined]
    (strict,) = [param for param in validate.params if "--strict" in param.opts]
    assert "warnings" in strict.help and "stale tracker" not in strict.help, strict.help
