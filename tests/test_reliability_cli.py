"""Bad command lines, configs and data, and a disk that fills up during a save.

Each case of `BAD_INPUTS` (tests/reliability_support.py) must print exactly one `error:`
line naming the problem, exit 2 (usage) or 1 (runtime), and leave the run's previous
checkpoint byte-identical. A save that runs out of disk fails the same way and leaves
the previous step, the tracker and no temp dir behind.
"""

from __future__ import annotations

import pytest

import reliability_support as rs


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    return rs.make_pristine(tmp_path_factory.mktemp("bad_input"))


@pytest.mark.parametrize("bad", rs.BAD_INPUTS, ids=lambda b: b.name)
def test_bad_input(pristine, tmp_path, bad):
    observed = rs.run_bad_input(bad, pristine, tmp_path)
    assert not observed.problems, f"{observed.problems}\n{observed.outcome.output[-2000:]}"


def test_disk_full_during_save(pristine, tmp_path):
    observed, how = rs.disk_full_run(pristine, tmp_path)
    assert not observed.problems, f"{how}: {observed.problems}\n{observed.outcome.output[-2000:]}"
