"""The one-line error every mfsdp command ends a failure with, checked the same way by the
hostile-input suites."""

from __future__ import annotations


def one_error(stderr: str, *needles: str) -> str:
    """The single non-blank line of `stderr`, which must be `error: ...` holding every needle."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]
