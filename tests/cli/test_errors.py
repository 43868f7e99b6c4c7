"""One error hierarchy: every error class mfsdp defines has a kind that carries the exit code,
and the CLI maps errors by kind in one place (bugs keep their traceback)."""

from __future__ import annotations

import ast
import builtins
import importlib

import pytest
from click.testing import CliRunner

from mfsdp_ckpt.errors import MfsdpError, MfsdpFailedError, MfsdpUsageError
from tests.support.cli_errors import group_raising
from tests.support.paths import REPO

PACKAGES = ("mfsdp_ckpt", "trainer", "cli")
BUILTIN_ERRORS = {
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, Exception)
}


def _error_classes() -> list[tuple[str, str]]:
    """(module, class) for each class that derives from a builtin exception or another error
    class, read from the source so no module is left out for failing to import."""
    found = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            module = ".".join(path.relative_to(REPO).with_suffix("").parts)
            for node in ast.parse(path.read_text()).body:
                if not isinstance(node, ast.ClassDef):
                    continue
                bases = {ast.unparse(base).rsplit(".", 1)[-1] for base in node.bases}
                if bases & BUILTIN_ERRORS or any(b.endswith(("Error", "Refused")) for b in bases):
                    found.append((module, node.name))
    return found


def test_the_source_walk_finds_the_known_errors():
    names = {name for _, name in _error_classes()}
    assert {"CheckpointPathError", "ConfigError", "ExportError", "CheckpointFileError"} <= names


@pytest.mark.parametrize(("module", "name"), _error_classes())
def test_every_error_class_has_a_kind(module, name):
    cls = getattr(importlib.import_module(module), name)
    if cls in (MfsdpError, MfsdpUsageError, MfsdpFailedError):
        return
    assert issubclass(cls, (MfsdpUsageError, MfsdpFailedError)), f"{module}.{name} has no kind"


@pytest.mark.parametrize(
    ("error", "code", "line"),
    [
        (MfsdpUsageError("runs/x: not a checkpoint"), 2, "runs/x: not a checkpoint"),
        (MfsdpFailedError("runs/x/.metadata: damaged"), 1, "runs/x/.metadata: damaged"),
        (OSError(28, "No space left on device"), 1, "No space left on device"),
        (OSError(28, "No space left on device", "/o/x"), 1, "/o/x: No space left on device"),
    ],
)
def test_errors_become_one_line_and_their_kinds_exit_code(error, code, line):
    result = CliRunner().invoke(group_raising(error), ["go"])
    assert result.exit_code == code
    assert result.output.strip().splitlines() == [f"error: {line}"]


def test_a_bug_keeps_its_traceback():
    result = CliRunner().invoke(group_raising(KeyError("bug")), ["go"])
    assert isinstance(result.exception, KeyError)
