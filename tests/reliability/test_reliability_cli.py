"""Bad command lines, configs and data, and a disk that fills up during a save.

Each case of `BAD_INPUTS` (tests/reliability/bad_inputs.py) must print exactly one `error:`
line naming the problem, exit 2 (usage) or 1 (runtime), and leave the run's previous
checkpoint byte-identical. A save that runs out of disk fails the same way and leaves
the previous step, the tracker and no temp dir behind.
"""

from __future__ import annotations

import pytest

from tests.reliability.bad_inputs import BAD_INPUTS, run_bad_input
from tests.reliability.disk_full import disk_full_run
from tests.reliability.sft_run import make_pristine
from tests.support.paths import REPO


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    return make_pristine(tmp_path_factory.mktemp("bad_input"))


@pytest.mark.parametrize("bad", BAD_INPUTS, ids=lambda b: b.name)
def test_bad_input(pristine, tmp_path, bad):
    observed = run_bad_input(bad, pristine, tmp_path)
    assert not observed.problems, f"{observed.problems}\n{observed.outcome.output[-2000:]}"


def test_disk_full_during_save(pristine, tmp_path):
    observed, how = disk_full_run(pristine, tmp_path)
    assert not observed.problems, f"{how}: {observed.problems}\n{observed.outcome.output[-2000:]}"


WRITER_THREAD_FAILURE = r"""
import resource, sys, torch
sys.path.insert(0, sys.argv[1])
from mfsdp_ckpt.checkpoint_failures import CheckpointSaveError
from mfsdp_ckpt.checkpointer import Checkpointer
# only the file with the big tensor exceeds it
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
state = {"big": torch.randn(1 << 19), **{f"small{i}": torch.randn(16) for i in range(6)}}
try:
    writer = Checkpointer(sys.argv[2], strategy="none", io_threads=4)
    writer.save(1, {"model": state}, contents=("model",))
    print("saved")
except CheckpointSaveError as err:
    print(f"refused: {err}")
"""


def test_a_write_failing_in_one_writer_thread_fails_the_save(tmp_path):
    """DCP's extra writer threads only print a failed write; the stock writer then commits
    a checkpoint whose largest tensor has no storage entry (fault `storage_entry_missing`
    of the matrix). The save must fail instead and commit nothing."""
    import subprocess
    import sys

    from mfsdp_ckpt.format import run_steps

    done = subprocess.run(
        [sys.executable, "-c", WRITER_THREAD_FAILURE, str(REPO), str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.stdout.startswith("refused: ") and "File too large" in done.stdout, (
        done.stdout + done.stderr[-2000:]
    )
    assert run_steps.list_complete_steps(tmp_path / "run") == [] and not list(
        (tmp_path / "run").glob("*.tmp")
    )
