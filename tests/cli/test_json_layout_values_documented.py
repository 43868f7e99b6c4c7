"""Every `layout` value `ckpt export-hf --json` and `ckpt import-hf --json` can print is
listed in docs/json.md, in the command's table and in "Fields that share a name".

Was: the page said `hf` or `mcore`, while LoRA exports print `hf (LoRA merged)` and `peft
adapter`, so a script branching on `layout == "hf"` misread them. The values are found in
the source (each result built, and the `layout` it is given), not listed here, so a new
export kind cannot go undocumented.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import re

import pytest

from mfsdp_ckpt.convert.conversion_result import ConversionResult
from mfsdp_ckpt.convert.name_maps import LAYOUTS
from tests.support.paths import REPO

JSON_DOC = REPO / "docs" / "json.md"
SOURCES = ("mfsdp_ckpt", "cli")
# the command whose --json object each result class is
COMMANDS = {"ExportResult": "ckpt export-hf", "ImportResult": "ckpt import-hf"}
LAYOUT_INDEX = [f.name for f in dataclasses.fields(ConversionResult)].index("layout")


def _modules() -> list[tuple[str, ast.Module]]:
    """(dotted name, parsed source) of every module under SOURCES."""
    found = []
    for root in SOURCES:
        for path in sorted((REPO / root).rglob("*.py")):
            name = ".".join(path.relative_to(REPO).with_suffix("").parts)
            found.append((name, ast.parse(path.read_text(), str(path))))
    return found


def _result_classes(modules: list[tuple[str, ast.Module]]) -> set[str]:
    """The names of the classes built on ConversionResult (each command's result)."""
    return {
        node.name
        for _, tree in modules
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        and any(isinstance(b, ast.Name) and b.id == ConversionResult.__name__ for b in node.bases)
    }


def _layout_argument(call: ast.Call) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == "layout":
            return keyword.value
    return call.args[LAYOUT_INDEX] if len(call.args) > LAYOUT_INDEX else None


def _values(module: str, expr: ast.expr) -> set[str]:
    """The layout values `expr`, in `module`, can be: a string, a module-level name of one,
    or a plan's `layout`, which export and import choose among name_maps.LAYOUTS (their
    `--layout` choices, or what `detect_layout` finds)."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return {expr.value}
    if isinstance(expr, ast.Name):
        value = getattr(importlib.import_module(module), expr.id)
        assert isinstance(value, str), f"{module}: layout {expr.id} is not a string"
        return {value}
    if isinstance(expr, ast.Attribute) and expr.attr == "layout":
        return set(LAYOUTS)
    raise AssertionError(f"{module}: cannot tell which layout {ast.unparse(expr)} gives")


def produced_layouts() -> dict[str, set[str]]:
    """Each command's `layout` values, by the result objects its code builds."""
    modules = _modules()
    classes = _result_classes(modules)
    assert classes, "no ConversionResult subclasses found"
    assert classes <= set(COMMANDS), f"a result class of another command: {classes}"
    produced: dict[str, set[str]] = {}
    for module, tree in modules:
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name not in classes:
                continue
            layout = _layout_argument(node)
            assert layout is not None, f"{module}: {name}(...) without its layout"
            produced.setdefault(COMMANDS[name], set()).update(_values(module, layout))
    return produced


def _table_layout_cell(command: str) -> str:
    """The meaning of `layout` in docs/json.md's table of `mfsdp COMMAND`."""
    in_section = False
    for line in JSON_DOC.read_text().splitlines():
        if line.startswith("## "):
            in_section = f"`mfsdp {command}`" in line
        if in_section and line.startswith("| `layout` |"):
            return line.split("|")[3]
    raise AssertionError(f"docs/json.md: no `layout` row for mfsdp {command}")


def _shared_name_bullet() -> str:
    """The "Fields that share a name" bullet on `layout`, its lines joined."""
    text = JSON_DOC.read_text()
    found = re.search(r"^- `layout`:(.*?)(?=^- |^\s*$)", text, re.MULTILINE | re.DOTALL)
    assert found, "docs/json.md: no bullet on `layout` among the shared names"
    return " ".join(found.group(1).split())


def _quoted(text: str) -> set[str]:
    return set(re.findall(r"`([^`]+)`", text))


@pytest.mark.parametrize("command", sorted(set(COMMANDS.values())))
def test_every_layout_a_command_prints_is_in_its_table(command):
    produced = produced_layouts()[command]
    missing = produced - _quoted(_table_layout_cell(command))
    assert not missing, f"docs/json.md, mfsdp {command}: `layout` does not list {missing}"


def test_every_layout_is_in_the_shared_names_bullet():
    produced = set().union(*produced_layouts().values())
    missing = produced - _quoted(_shared_name_bullet())
    assert not missing, f"docs/json.md, shared names: `layout` does not list {missing}"


def test_the_lora_exports_are_among_those_found():
    """The scan reads each export kind: the LoRA ones are constants in their own modules."""
    from mfsdp_ckpt.convert.lora_merge import MERGED_LAYOUT
    from mfsdp_ckpt.convert.peft_adapter import ADAPTER_LAYOUT

    assert {MERGED_LAYOUT, ADAPTER_LAYOUT, *LAYOUTS} <= produced_layouts()["ckpt export-hf"]
