"""mypy passes where `./dev` leaves an optional extra out.

`./dev` installs the project with some extras (`pip install -e ".[dev,...]"`) and leaves the
others out (vLLM's CPU build off Python 3.11 x86_64 or with MFSDP_SKIP_VLLM=1): there the
code-quality test's mypy met `from vllm import LLM` with no vllm installed and failed
(`import-not-found`), a red `./dev test` on every Python 3.12 machine, while a machine with
vLLM passed. Each extra `./dev` may leave out that the code imports must be in the mypy
override that makes an absent library's names Any.
"""

from __future__ import annotations

import ast
import re
import tomllib

from tests.support.paths import REPO

PACKAGES = ("mfsdp_ckpt", "cli", "trainer")


def imported_top_level_modules() -> set[str]:
    found = set()
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    found |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    found.add(node.module.split(".")[0])
    return found


def extras_dev_installs() -> set[str]:
    script = (REPO / "dev").read_text()
    installs = re.findall(r'pip install -q -e "\.\[([^\]]+)\]"', script)
    assert installs, "dev no longer installs the project with extras as this test reads it"
    return {extra.strip() for line in installs for extra in line.split(",")}


def test_every_extra_dev_may_leave_out_is_any_to_mypy():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    extras = project["project"]["optional-dependencies"]
    installed = extras_dev_installs()
    always = {
        re.split(r"[<>=!~;\[ ]", requirement)[0].replace("-", "_").lower()
        for extra in installed
        for requirement in extras[extra]
    }
    optional = {
        re.split(r"[<>=!~;\[ ]", requirement)[0].replace("-", "_").lower()
        for extra, requirements in extras.items()
        if extra not in installed
        for requirement in requirements
    } - always
    ignored = set()
    for override in project["tool"]["mypy"]["overrides"]:
        if override.get("ignore_missing_imports"):
            ignored |= set(override["module"])
    left_out = sorted(
        module
        for module in optional & imported_top_level_modules()
        if not {module, f"{module}.*"} <= ignored
    )
    assert "vllm" in optional  # what this guards: the extra ./dev leaves out on 3.12
    assert left_out == [], f"add {left_out} (and '<name>.*') to the mypy override"
