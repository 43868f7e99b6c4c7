"""Crash safety: SIGKILL a 2-process FSDP2 run at every point of a checkpoint save.

For each kill point (tests/reliability/crashes.py `CRASHES`, mapped onto the save
protocol's phases), `mfsdp ckpt validate RUN` exits 0 on the previous complete step,
`checkpoint.resume=auto` continues from it, and the losses of the killed-then-resumed
run equal an uninterrupted run's bitwise. One uninterrupted reference run is shared.
"""

from __future__ import annotations

import pytest

from tests.reliability.crashes import CRASH_STEPS, CRASHES, crash_data, reference_run, run_crash


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("crash")
    data = crash_data(root)
    return data, root, reference_run(data, root)


def test_reference_run_learns(reference):
    _, _, losses = reference
    assert sorted(losses) == list(range(1, CRASH_STEPS + 1))
    assert losses[CRASH_STEPS] < losses[1]


@pytest.mark.slow
@pytest.mark.parametrize("crash", CRASHES, ids=lambda c: c.name)
def test_crash_during_save(reference, crash):
    data, root, losses = reference
    result = run_crash(crash, data, root, losses)
    assert not result.problems, result.problems


def test_every_save_phase_is_crashed():
    from mfsdp_ckpt.checkpointer import SAVE_PHASES

    crashed = {c.kill_at.split(":")[0] for c in CRASHES}
    assert crashed == set(SAVE_PHASES)
    assert any(c.async_save for c in CRASHES)
