"""Crash safety: SIGKILL a 2-process FSDP2 run at every point of a checkpoint save.

The kill points (tests/reliability/crashes.py `CRASHES`, mapped onto the save protocol's
phases) are chained through one run: after each kill, `mfsdp ckpt validate RUN` exits 0 on
the step saved before it, `checkpoint.resume=auto` continues from that step (and is killed
at the next point), and every loss of the killed-then-resumed launches equals an
uninterrupted run's bitwise. One uninterrupted reference run is shared.
"""

from __future__ import annotations

import pytest

from tests.reliability.crashes import CRASH_STEPS, CRASHES, crash_data, reference_run, run_chain


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("crash")
    data = crash_data(root)
    return data, root, reference_run(data, root)


@pytest.fixture(scope="module")
def chain(reference):
    data, root, losses = reference
    return run_chain(data, root, losses)


def test_reference_run_learns(reference):
    _, _, losses = reference
    assert sorted(losses) == list(range(1, CRASH_STEPS + 1))
    assert losses[CRASH_STEPS] < losses[1]


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(CRASHES)), ids=[c.name for c in CRASHES])
def test_crash_during_save(chain, index):
    result = chain[index]
    assert result.crash is CRASHES[index]
    assert not result.problems, result.problems


def test_every_save_phase_is_crashed():
    from mfsdp_ckpt.kill_points import SAVE_PHASES

    crashed = {c.target.split(":")[0] for c in CRASHES}
    assert crashed == set(SAVE_PHASES)
    assert any(c.async_save for c in CRASHES)
