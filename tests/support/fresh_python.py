"""Run mfsdp, or a few lines of Python, in a fresh interpreter: what a user's shell would
start, so import costs and exit codes are the real ones, not those of the test process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from tests.support.paths import REPO

MFSDP = [sys.executable, "-c", "from cli.main import main; main()"]  # the `mfsdp` command
HEAVY = ("torch.distributed.checkpoint", "torch.distributed.tensor", "transformers")

LOADED_AT_EXIT = r"""
import atexit, json, sys
sys.path.insert(0, sys.argv[1])
roots = json.loads(sys.argv.pop(2))
atexit.register(lambda: print(json.dumps(sorted(
    m for m in sys.modules if any(m == root or m.startswith(root + ".") for root in roots)))))
{body}
"""


# `modules_after`'s body for a run of mfsdp's own main: its exit code printed, not raised
MAIN_CATCHING_EXIT = """
import sys
sys.argv = ['mfsdp', *sys.argv[2:]]
from cli.main import main
try:
    main()
except SystemExit as done:
    print(json.dumps(done.code), file=sys.stderr)
"""


def mfsdp(
    *args: str,
    cwd: Path = REPO,
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
    stderr: int | IO[str] = subprocess.PIPE,
) -> subprocess.CompletedProcess:
    """`mfsdp ARGS` in a fresh interpreter, run from `cwd` (the repository root unless given),
    in `env` (this process's environment unless given) with the repository first on its
    PYTHONPATH; stdout as text, and stderr too unless `stderr` sends it elsewhere (a file, a
    descriptor)."""
    env = os.environ if env is None else env
    return subprocess.run(
        [*MFSDP, *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        timeout=timeout,
        env={
            **env,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
        },
    )


def demo_with_stdout_closed(out: Path) -> tuple[int, str]:
    """`mfsdp demo --out OUT`, run from OUT's parent, whose stdout is closed before it prints
    (as `| head -0` does): its exit status and stderr."""
    demo = subprocess.Popen(
        [*MFSDP, "demo", "--out", str(out)],
        cwd=out.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert demo.stdout is not None
    demo.stdout.close()
    _out, err = demo.communicate(timeout=120)
    return demo.returncode, err


def modules_after(body: str, *args: str, roots: tuple[str, ...] = HEAVY) -> list[str]:
    """Run `body` in a fresh interpreter (`sys.argv[2:]` = `args`); the modules under `roots`
    (packages, with their submodules) in its sys.modules when it exits."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            LOADED_AT_EXIT.format(body=body),
            str(REPO),
            json.dumps(roots),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
