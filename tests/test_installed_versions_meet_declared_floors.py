"""The packages installed here meet the floors pyproject.toml declares: an environment older
than a floor (click 8.1, pyarrow 15, peft 0.17 once broke every error line, every parquet
read, every LoRA run) fails here by name, not later as a traceback in some command. An
optional extra's requirement is held to its floor where that package is installed."""

from __future__ import annotations

import importlib.metadata
import tomllib

import pytest
from packaging.requirements import Requirement

from tests.support.paths import REPO

_PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
_REQUIRED = [Requirement(line) for line in _PROJECT["dependencies"]]
_OPTIONAL = [
    Requirement(line) for lines in _PROJECT["optional-dependencies"].values() for line in lines
]


@pytest.mark.parametrize(
    ("requirement", "required"),
    [(r, True) for r in _REQUIRED] + [(r, False) for r in _OPTIONAL],
    ids=lambda value: str(value) if isinstance(value, Requirement) else "",
)
def test_installed_version_meets_the_declared_floor(requirement: Requirement, required: bool):
    if requirement.marker is not None and not requirement.marker.evaluate():
        return  # a platform this requirement is not for
    try:
        installed = importlib.metadata.version(requirement.name)
    except importlib.metadata.PackageNotFoundError:
        assert not required, f"{requirement.name} is not installed; pyproject.toml needs it"
        return  # an optional extra this environment does without
    assert requirement.specifier.contains(installed, prereleases=True), (
        f"{requirement.name} {installed} is installed; pyproject.toml needs {requirement}"
    )
