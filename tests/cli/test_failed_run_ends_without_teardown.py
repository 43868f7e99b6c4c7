"""A training run that failed ends its process without the interpreter's teardown once the
error is said. That teardown, in a process that had run a process group, with the failed
run's objects still held by the error, sometimes aborted: "terminate called without an
active exception" under the error line, and exit -6 where scripts wait for 1 or 2. The
abort is rare, so these tests check the exit path itself, through sitecustomize: an object
whose `__del__` says when the interpreter's teardown ran, and an `atexit` hook, which must
run either way (the user's code registers them: a reward's summary, multiprocessing's end
of its daemon helpers)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.cli_errors import error_prefixed_lines
from tests.support.paths import EXAMPLES, REPO
from tests.support.sft import write_chat_jsonl

TEARDOWN_LINE = "teardown ran"
EXIT_HOOK_LINE = "exit hooks ran"
SITECUSTOMIZE = f"""import atexit, os
class _Teardown:
    def __del__(self, write=os.write):
        write(2, {TEARDOWN_LINE.encode()!r})
_marker = _Teardown()
atexit.register(lambda: os.write(2, {EXIT_HOOK_LINE.encode()!r}))
"""


def _train_sft(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    """`python -m cli.train sft` (what a launched rank runs; `mfsdp` runs the same command
    in-process) on the tiny default, under `SITECUSTOMIZE`."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=24)
    command = [sys.executable, "-m", "cli.train", "sft", "--config"]
    command += [str(EXAMPLES / "sft_tiny_cpu.yaml"), f"data.train_files={data}"]
    command += [f"trainer.run_dir={tmp_path / 'run'}", "trainer.progress_bar=false", *overrides]
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_a_run_that_failed_after_its_group_started_skips_the_teardown(tmp_path):
    done = _train_sft(tmp_path, "data.global_batch_size=100000")
    assert done.returncode == 2, done.stderr
    assert error_prefixed_lines(done.stderr) == [
        "error: data.global_batch_size=100000 exceeds the 22 training rows"
    ], done.stderr
    assert TEARDOWN_LINE not in done.stderr
    assert EXIT_HOOK_LINE in done.stderr


def test_a_command_that_failed_before_any_group_ends_as_python_does(tmp_path):
    """A config mistake found before the run starts: no group ran, and the teardown runs."""
    done = _train_sft(tmp_path, "optim.lrr=1e-5")
    assert done.returncode == 2, done.stderr
    assert len(error_prefixed_lines(done.stderr)) == 1, done.stderr
    assert TEARDOWN_LINE in done.stderr
    assert EXIT_HOOK_LINE in done.stderr
