"""What one module of the project may take from another: public names only, imported at the
top (no cycle broken by an import inside a function), each file name spelled in one place,
and a docstring that points at another module's helper naming one that is there.

A private name imported elsewhere is a helper whose callers its own module cannot see, and
a second spelling of `config.json` is one a rename misses.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from mfsdp_ckpt.format import model_files
from tests.support.paths import REPO

PACKAGES = ("trainer", "cli", "mfsdp_ckpt")


def _sources() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (REPO / package).rglob("*.py"))


def _name(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def _project_imports(tree: ast.AST) -> list[ast.ImportFrom]:
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and node.module is not None
        and node.module.split(".")[0] in PACKAGES
    ]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_private_name_is_imported_from_another_module():
    found = [
        f"{_name(path)}:{node.lineno} imports {alias.name} from {node.module}"
        for path in _sources()
        for node in _project_imports(ast.parse(path.read_text()))
        for alias in node.names
        if _private(alias.name)
    ]
    assert found == []


def test_config_schema_and_coercion_import_each_other_at_no_point_inside_a_function():
    """`trainer.config` imports `trainer.config_coercion` at its top; the coercion takes
    what it shares with the schema from `trainer.config_base`, never from the schema."""
    for name in ("trainer/config.py", "trainer/config_coercion.py"):
        tree = ast.parse((REPO / name).read_text())
        top = set(tree.body)
        deferred = [
            f"{name}:{node.lineno} imports {node.module}"
            for node in _project_imports(tree)
            if node not in top and node.module.startswith("trainer.config")
        ]
        assert deferred == []
    coercion = ast.parse((REPO / "trainer/config_coercion.py").read_text())
    assert "trainer.config" not in {node.module for node in _project_imports(coercion)}


def test_model_file_names_are_spelled_only_in_model_files():
    spelled = {
        value: name
        for name, value in vars(model_files).items()
        if name.isupper() and isinstance(value, str)
    }
    home = Path(model_files.__file__).resolve()
    again = [
        f"{_name(path)}:{node.lineno} spells {node.value.value!r} ({spelled[node.value.value]})"
        for path in _sources()
        if path.resolve() != home
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and node.value.value in spelled
    ]
    assert again == []


PRIVATE_REFERENCE = re.compile(r"`([a-z_]+)\.(_[A-Za-z]\w*)`")


def test_a_docstring_naming_another_modules_helper_names_one_it_has():
    modules: dict[str, list[Path]] = {}
    for path in _sources():
        modules.setdefault(path.stem, []).append(path)
    stale = []
    for path in _sources():
        for match in PRIVATE_REFERENCE.finditer(path.read_text()):
            module, helper = match.groups()
            homes = modules.get(module, [])
            if len(homes) != 1:  # not a module of the project, or a name several share
                continue
            defined = re.compile(rf"^\s*(def|class) {helper}\b|^{helper}\b\s*[:=]", re.M)
            if not defined.search(homes[0].read_text()):
                stale.append(f"{_name(path)} names {match.group(0)}")
    assert stale == []
