"""The command a stopped demo names to start over repeats the --steps and --nproc it was
given. It was `mfsdp demo --out OUT` alone: a user who chose `--steps 2 --nproc 1` to keep
the demo short, stopped it with Ctrl-C and ran the command named trained 80 steps on 2
processes."""

from __future__ import annotations

import pytest

from cli.demo import EXPORTING, GENERATING, VALIDATING, _Phase
from mfsdp_ckpt.command_as_run import DEV_SCRIPT

CASES = [  # (steps, nproc) -> the options repeated; the defaults are left out
    ((80, 2), ""),
    ((2, 1), " --steps 2 --nproc 1"),
    ((5, 2), " --steps 5"),
    ((80, 4), " --nproc 4"),
]


@pytest.mark.parametrize(("given", "options"), CASES, ids=[o or "defaults" for _, o in CASES])
def test_every_stopped_line_names_the_demo_as_it_was_given(given, options, tmp_path, monkeypatch):
    monkeypatch.delenv(DEV_SCRIPT, raising=False)
    out = tmp_path / "d"
    phase = _Phase(out, *given)
    again = f"`mfsdp demo --out {out}{options}` again starts over"
    assert phase.again() == again
    for now in ("data", "train", VALIDATING, EXPORTING, GENERATING):
        phase.now = now
        assert phase.interrupted().endswith(f"; {again}"), now
