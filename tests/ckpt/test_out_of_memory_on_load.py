"""Out of memory while resuming, or anywhere a library allocates: one line, exit 1.

A resume whose checkpoint piece did not fit said "load failed: RuntimeError: [enforce fail at
alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: ..." (naming neither the tensor nor what
to do), and a MemoryError outside mfsdp's own reads was a traceback."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys

import pytest
import torch

from tests.support.paths import REPO

NUMEL = 32 << 20  # float32: 128 MiB, read whole by DCP on load

# Saves one tensor, then loads it with the address space capped a little above what the
# process holds once the target is allocated: DCP's read of the stored piece cannot fit.
_LOAD_CAPPED = """
import resource, sys, torch
from mfsdp_ckpt.checkpointer import Checkpointer, load_checkpoint
from mfsdp_ckpt.format import checkpoint_resolution, layout
from mfsdp_ckpt.storage.tensor_memory import TensorMemoryError
run, numel = sys.argv[1], int(sys.argv[2])
Checkpointer(run, strategy="none").save(1, {"model": {"w": torch.ones(numel)}}, contents=("model",))
paths = checkpoint_resolution.resolve_checkpoint(layout.step_dir(run, 1))
target = {"model": {"w": torch.zeros(numel)}}
with open("/proc/self/status") as status:
    held = next(int(line.split()[1]) << 10 for line in status if line.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (held + (96 << 20), resource.RLIM_INFINITY))
try:
    load_checkpoint(paths, target, contents=("model",))
except TensorMemoryError as err:
    print(err)
"""


def test_a_resume_out_of_memory_names_the_checkpoint_and_its_largest_piece(tmp_path):
    run = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-c", _LOAD_CAPPED, str(run), str(NUMEL)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip()
    dist_ckpt = run / "global_step_1" / "dist_ckpt"
    assert line.startswith(f"{dist_ckpt}: out of memory loading it"), line
    assert f"of model.w, is {NUMEL * 4} bytes" in line and "ulimit -v" in line, line
    assert "\n" not in line and "enforce fail" not in line


def _raise(err: BaseException) -> None:
    raise err


@pytest.mark.parametrize(
    "allocate",
    [
        lambda: bytearray(1 << 62),  # Python's MemoryError
        lambda: torch.empty(1 << 62, dtype=torch.uint8),  # torch's allocator RuntimeError
        # what a worker pool and mmap raise under `ulimit -v` (a thread's stack, a mapping)
        lambda: _raise(RuntimeError("can't start new thread")),
        lambda: _raise(OSError(errno.ENOMEM, os.strerror(errno.ENOMEM), "/runs/out")),
    ],
    ids=["MemoryError", "torch allocator", "thread", "ENOMEM"],
)
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_an_allocation_failing_anywhere_is_one_line_exit_1(capsys, allocate, as_json):
    from cli.errors import report_errors

    handler = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit) as exited:
            report_errors(allocate, as_json=lambda: as_json)
    finally:
        signal.signal(signal.SIGINT, handler)
    said = capsys.readouterr()
    assert exited.value.code == 1
    lines = said.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: out of memory"), said.err
    assert "ulimit -v" in lines[0]
    if as_json:
        assert json.loads(said.out) == {"error": lines[0].removeprefix("error: "), "exit_code": 1}
    else:
        assert said.out == ""


def test_an_error_that_is_not_an_allocation_keeps_its_traceback():
    """A bug in mfsdp (any other RuntimeError) is not dressed up as the machine's failure."""
    from cli.errors import report_errors

    handler = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(RuntimeError, match="a bug"):
            report_errors(lambda: (_ for _ in ()).throw(RuntimeError("a bug")))
    finally:
        signal.signal(signal.SIGINT, handler)
