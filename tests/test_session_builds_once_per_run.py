"""A session fixture built through tests/support/once_per_run.py is built by the first xdist
worker that asks and read by the others (each worker built the GRPO warm start, minutes of
two SFT runs, for itself); a build that failed is not taken for a finished one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.once_per_run import built_once_per_run


class _WorkerTemp:
    """pytest's `tmp_path_factory` as one xdist worker has it: its own base temp dir inside
    the run's."""

    def __init__(self, run: Path, worker: str) -> None:
        self.base = run / f"popen-{worker}"
        self.base.mkdir(parents=True, exist_ok=True)

    def getbasetemp(self) -> Path:
        return self.base

    def mktemp(self, basename: str, numbered: bool = True) -> Path:
        raise AssertionError("a worker of a run builds into the folder the workers share")


def _counting_build(builds: list[Path]) -> Callable[[Path], dict[str, Path]]:
    def build(folder: Path) -> dict[str, Path]:
        builds.append(folder)
        (folder / "weights").write_text("built")
        return {"weights": folder / "weights"}

    return build


def test_a_second_worker_reads_what_the_first_built(tmp_path: Path, monkeypatch) -> None:
    builds: list[Path] = []
    results = []
    for worker in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        factory = _WorkerTemp(tmp_path, worker)
        results.append(built_once_per_run(factory, "model", _counting_build(builds)))
    assert builds == [tmp_path / "model"]
    assert results[0] == results[1] == {"weights": tmp_path / "model" / "weights"}


def test_a_build_that_failed_is_built_again_from_an_empty_folder(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")

    def failing(folder: Path) -> None:
        (folder / "half").write_text("cut short")
        raise RuntimeError("build failed")

    with pytest.raises(RuntimeError, match="build failed"):
        built_once_per_run(_WorkerTemp(tmp_path, "gw0"), "model", failing)
    builds: list[Path] = []
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    built_once_per_run(_WorkerTemp(tmp_path, "gw1"), "model", _counting_build(builds))
    assert builds == [tmp_path / "model"]
    assert not (tmp_path / "model" / "half").exists()
