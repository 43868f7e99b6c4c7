"""What tests/test_module_boundaries.py does not see: a private name reached through a
module (`dcp_metadata._StorageInfo`), and one a committed script or bench takes from the
product or from a fixture builder (`fixtures._versions()`).

Either is a helper whose callers its own module cannot see: renamed or changed there, the
writer, a script or a bench breaks with nothing in the module saying so."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import REPO

PACKAGES = ("trainer", "cli", "mfsdp_ckpt", "bench", "scripts", "tests")
CHECKED = ("trainer", "cli", "mfsdp_ckpt", "scripts", "bench")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _fixture_builders() -> set[str]:
    """Modules scripts import by bare name from tests/fixtures (after a sys.path insert)."""
    return {path.stem for path in (REPO / "tests" / "fixtures").rglob("*.py")}


def _ours(module: str, builders: set[str]) -> bool:
    return module.split(".")[0] in PACKAGES or module in builders


def _reached(path: Path, builders: set[str]) -> list[str]:
    tree = ast.parse(path.read_text())
    where = path.relative_to(REPO).as_posix()
    modules: set[str] = set()  # names bound to a module of ours (or a name from one)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and _ours(node.module, builders):
            for alias in node.names:
                modules.add(alias.asname or alias.name)
                if _private(alias.name) and where.split("/")[0] in ("scripts", "bench"):
                    found.append(f"{where}:{node.lineno} imports {alias.name} from {node.module}")
        elif isinstance(node, ast.Import):
            modules.update(
                alias.asname or alias.name.split(".")[0]
                for alias in node.names
                if _ours(alias.name, builders)
            )
    found += [
        f"{where}:{node.lineno} uses {node.value.id}.{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in modules
        and _private(node.attr)
    ]
    return found


def test_no_private_name_is_reached_from_another_module():
    builders = _fixture_builders()
    found = [
        line
        for package in CHECKED
        for path in sorted((REPO / package).rglob("*.py"))
        for line in _reached(path, builders)
    ]
    assert found == []
