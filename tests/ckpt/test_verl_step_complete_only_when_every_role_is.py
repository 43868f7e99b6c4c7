"""A verl RL step is complete only when every role's DCP there holds its `.metadata`.

verl saves actor/, then critic/, then data.pt, then the tracker: a run stopped in between
leaves one role's dist_ckpt finished and the other's not. Any role's `.metadata` made the
step complete, so the newer-steps note offered it ("give .../global_step_N to read the newer
one"), the list of a run without tracker gave it unmarked, and a tracker naming it was
refused with the step itself listed among the complete ones to give instead.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mfsdp_ckpt.format import layout, run_steps
from tests.support.interop_layouts import STEP, one_error_line, run_cli, verl_rl_v1

NEWER = STEP + 10


def _run_with_one_role_unfinished(fixture: Path, root: Path, unfinished: str) -> Path:
    """verl's RL run: step STEP complete, step NEWER with `unfinished`'s DCP lacking its
    `.metadata` and the other role's copied whole from STEP; the tracker names STEP."""
    run = verl_rl_v1(fixture, root).run
    newer = layout.step_dir(run, NEWER)
    shutil.copytree(layout.step_dir(run, STEP), newer)
    (newer / unfinished / "dist_ckpt" / layout.DCP_METADATA_FILE).unlink()
    return run


@pytest.mark.parametrize("unfinished", layout.ROLES)
def test_one_unfinished_role_makes_the_step_unfinished(unfinished, made_optim, tmp_path):
    run = _run_with_one_role_unfinished(made_optim, tmp_path, unfinished)
    name = f"global_step_{NEWER}"
    assert run_steps.step_states(run, [name])[name] == run_steps.UNFINISHED
    lacks = run_steps.unfinished_save(run / name)
    assert lacks is not None and f"{unfinished}/dist_ckpt" in lacks, lacks


@pytest.mark.parametrize("unfinished", layout.ROLES)
def test_the_newer_steps_note_offers_no_step_a_role_of_which_did_not_finish(
    unfinished, made_optim, tmp_path
):
    run = _run_with_one_role_unfinished(made_optim, tmp_path, unfinished)
    code, out, err = run_cli("ckpt", "validate", run, "--role", unfinished)
    said = out + err
    assert code == 0, said
    assert f"holds no .metadata in {unfinished}/dist_ckpt" in said, said
    assert "to read the newer one" not in said, said


def test_a_run_without_tracker_marks_the_step(made_optim, tmp_path):
    run = _run_with_one_role_unfinished(made_optim, tmp_path, "actor")
    (run / layout.TRACKER_FILE).unlink()
    code, out, err = run_cli("ckpt", "validate", run)
    line = one_error_line(err)
    assert code == 2, out + err
    assert f"give one of them (global_step_{STEP} (the newest complete one)" in line, line
    assert f"global_step_{NEWER} is a save that did not finish" in line, line


def test_a_tracker_naming_the_step_offers_only_complete_ones(made_optim, tmp_path):
    run = _run_with_one_role_unfinished(made_optim, tmp_path, "actor")
    (run / layout.TRACKER_FILE).write_text(str(NEWER))
    assert run_steps.complete_step_dirs(run) == [layout.step_dir(run, STEP)]
    code, out, err = run_cli("ckpt", "validate", run)
    assert code == 1 and f"global_step_{NEWER}: give one" not in out + err, out + err
