"""A session fixture's build done once per test run, not once per xdist worker.

`./dev test` spreads whole files over its workers (`--dist loadfile`), and each worker is a
session of its own: a session fixture that files on two workers use was built twice. Built
here, the first worker to ask builds it into a folder every worker of the run shares (beside
their own temp dirs), under a lock; the others wait for that build and read its result."""

from __future__ import annotations

import fcntl
import os
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeVar

T = TypeVar("T")


class TempDirs(Protocol):
    """What is used of pytest's `tmp_path_factory`."""

    def getbasetemp(self) -> Path: ...

    def mktemp(self, basename: str, numbered: bool = True) -> Path: ...


RESULT = "result.pickle"  # written last: a folder without it holds no finished build


def built_once_per_run(tmp_path_factory: TempDirs, name: str, build: Callable[[Path], T]) -> T:
    """`build(folder)`'s result for a folder named `name` that the workers of this run share
    (a folder of this session's own without xdist). The result is pickled beside what it
    built, so it must be plain data (paths, dicts) that names files in the folder; callers
    read those files and may add files of names of their own, never change the built ones."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return build(tmp_path_factory.mktemp(name))
    folder = tmp_path_factory.getbasetemp().parent / name
    with open(f"{folder}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        result = folder / RESULT
        if not result.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a build that failed in another worker
            folder.mkdir()
            built = build(folder)
            result.write_bytes(pickle.dumps(built))
            return built
        return pickle.loads(result.read_bytes())
