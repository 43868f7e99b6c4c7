"""Several `mfsdp` commands run one after another in ONE fresh interpreter, each with its own
stdout and stderr: a `mfsdp train` that refuses a damaged input loads torch and transformers
first (seconds each time), so cases that each read a different damaged input share that cost.

Each command is `cli.main.main()` called with its arguments, as a script running a sweep
calls it (`cli.main._called_as_the_program` is false): the command's exit status is the
`SystemExit` it ends with, its output what it wrote to descriptors 1 and 2 (C code's too),
and the interpreter stays up for the next one. A check that needs the process's own exit
(its status as the shell sees it, what is left running after it) keeps a launch of its own
(`tests.support.fresh_python.mfsdp`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import REPO


@dataclass(frozen=True)
class Ran:
    """One command's exit status and what it wrote."""

    returncode: int
    stdout: str
    stderr: str


def mfsdp_each(
    commands: Mapping[str, Sequence[str | os.PathLike[str]]], timeout: float = 600
) -> dict[str, Ran]:
    """`mfsdp ARGS` for each named ARGS of `commands`, in order, in one fresh interpreter run
    from the repository root (the repository first on its PYTHONPATH, as `mfsdp` has it): each
    name's exit status, stdout and stderr."""
    with tempfile.TemporaryDirectory(prefix="mfsdp_each_") as folder:
        given, results = Path(folder) / "commands.json", Path(folder) / "results.json"
        given.write_text(
            json.dumps([[os.fspath(arg) for arg in args] for args in commands.values()])
        )
        done = subprocess.run(
            [sys.executable, "-c", f"from {__name__} import serve; serve()", given, results],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={
                **os.environ,
                "PYTHONPATH": os.pathsep.join(
                    filter(None, [str(REPO), os.environ.get("PYTHONPATH")])
                ),
            },
        )
        assert done.returncode == 0 and results.exists(), done.stdout + done.stderr
        ran = json.loads(results.read_text())
    return {name: Ran(*each) for name, each in zip(commands, ran, strict=True)}


def serve() -> None:
    """In the fresh interpreter: run each command of `sys.argv[1]` (a JSON list of argument
    lists), write [exit status, stdout, stderr] of each to `sys.argv[2]`."""
    given, results = sys.argv[1], sys.argv[2]
    with open(given, encoding="utf-8") as handle:
        commands = json.load(handle)
    ran = [_run_one(args) for args in commands]
    with open(results, "w", encoding="utf-8") as handle:
        json.dump(ran, handle)


def _run_one(args: list[str]) -> tuple[int, str, str]:
    """`mfsdp ARGS` in this interpreter, descriptors 1 and 2 pointed at files of its own."""
    from cli.main import main

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        kept = os.dup(1), os.dup(2)
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.argv = ["mfsdp", *args]
        try:
            main()
            code = 0
        except SystemExit as ended:
            code = ended.code if isinstance(ended.code, int) else (0 if ended.code is None else 1)
        except BaseException:  # a traceback is what the test then shows, with its own status
            traceback.print_exc()
            code = -1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(kept[0], 1)
            os.dup2(kept[1], 2)
            os.close(kept[0])
            os.close(kept[1])
        out.seek(0)
        err.seek(0)
        return code, _text(out.read()), _text(err.read())


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")
