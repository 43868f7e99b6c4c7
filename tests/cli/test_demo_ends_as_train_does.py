"""`mfsdp demo` ends as `mfsdp train` does when its ranks stop: ranks stopped by a signal
the demo's own process did not get (SIGINT to the process group of a background job, whose
shell had the demo ignore it) exited 1 without a word, where `mfsdp train` says
"interrupted ...; the newest checkpoint is ..." and exits 130; a rank's own failure kept
its exit code (2 for a mistake) only under `mfsdp train`."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from cli.main import app


@pytest.mark.parametrize(
    "torchrun_code, exit_code, stopped",
    [
        (130, 130, "interrupted"),
        (-9, 1, "torchrun, the ranks' launcher, was killed by SIGKILL"),
        (2, 2, None),  # the rank said what was wrong
        (1, 1, None),
    ],
)
def test_ranks_that_stopped_end_the_demo_as_they_end_train(
    tmp_path, monkeypatch, torchrun_code, exit_code, stopped
):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr("cli.demo.run_ranks", lambda command, **popen: torchrun_code)
    out = tmp_path / "demo"
    done = CliRunner().invoke(app, ["demo", "--out", str(out), "--steps", "1", "--nproc", "1"])
    assert done.exit_code == exit_code, done.output
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    if stopped is None:
        assert errors == []
    else:
        assert errors == [
            f"error: {stopped}; no checkpoint was saved in {out / 'sft'} yet;"
            f" `mfsdp demo --out {out} --steps 1 --nproc 1` again starts over"
        ]
