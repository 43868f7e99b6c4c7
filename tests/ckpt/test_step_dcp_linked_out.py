"""A step whose DCP dir links out of it is "resolves outside" in every route.

A verl step whose `actor/dist_ckpt` was a link to a dir outside the step with no
`.metadata` was listed ("137 file(s)" for /etc) and called "a save that did not finish",
while the run's verdict called the same step complete and offered it; with a DCP at the
target it was "resolves outside". What lies outside is now never listed: every route
names the link, whatever is at its target.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.interop_layouts import one_error_line, run_cli


@pytest.fixture
def run(tmp_path) -> Path:
    """run/global_step_5/actor/dist_ckpt -> a dir outside holding two files, tracked."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    for name in ("a", "b"):
        (outside / name).write_text("x")
    run = tmp_path / "run"
    (run / "global_step_5" / "actor").mkdir(parents=True)
    (run / "global_step_5" / "actor" / "dist_ckpt").symlink_to(outside)
    (run / "latest_checkpointed_iteration.txt").write_text("5")
    return run


@pytest.mark.parametrize(
    "command",
    [
        ("validate", "{run}"),
        ("validate", "{run}/global_step_5"),
        ("validate", "{run}/global_step_5/actor"),
        ("inspect", "{run}/global_step_5"),
        ("export-hf", "{run}/global_step_5", "--out", "{run}/../hf"),
    ],
    ids=lambda c: f"{c[0]}-{c[1].rsplit('/', 1)[-1]}",
)
def test_every_route_names_the_link(command, run):
    """Was: "actor/dist_ckpt: 2 file(s), no .metadata: this save did not finish"."""
    code, stdout, err = run_cli("ckpt", *(part.format(run=run) for part in command))
    line = one_error_line(err)
    assert code == 1, stdout + err
    assert f"{run}/global_step_5/actor/dist_ckpt: resolves outside" in line, line
    assert "file(s)" not in stdout + err and "did not finish" not in stdout + err
