"""In mfsdp's own run dir (complete `global_step_N/` beside it), a tracker naming a step
dir holding no save (a Hugging Face model merged into `global_step_500/`, a config.json
alone, a PEFT adapter) was "holds no manifest.json, which mfsdp writes last (a save that
did not finish)" (exit 1) from `checkpoint.resume=auto` and `inspect`, and every list of
the run's step dirs marked it so: only another trainer's run dir gave the step's own line
(`test_tracked_step_holding_no_save_keeps_its_line`). Both kinds of run dir judge the
step by the same rule now (`save_pieces.holds_save_pieces`): that line after the
tracker's, exit 2, and no list marks the dir. A step dir of the run that does hold pieces
of a save (empty, or a `dist_ckpt/` without the manifest) is still a save that did not
finish (exit 1). A step dir past the tracker is refused for the save of its step a run
may make, not for "this run's", which a run stopping before that step never makes."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import app
from mfsdp_ckpt.format import run_steps
from mfsdp_ckpt.format.checkpoint_resolution import resolve_checkpoint
from mfsdp_ckpt.format.layout import (
    MANIFEST_FILE,
    TRACKER_FILE,
    CheckpointPathError,
    DamagedRunDirError,
    step_dir,
)
from tests.ckpt.test_unfinished_step_only_of_a_save import HOLDS, _fill


def _our_run(tmp_path: Path) -> Path:
    """mfsdp's run dir with complete steps 1 and 2 (their manifests there)."""
    run = tmp_path / "run"
    for step in (1, 2):
        step_dir(run, step).mkdir(parents=True)
        (step_dir(run, step) / MANIFEST_FILE).write_text("{}")
    return run


def _own_line(step: Path) -> str:
    with pytest.raises(CheckpointPathError) as given:
        resolve_checkpoint(step)
    return str(given.value)


@pytest.mark.parametrize("holds", HOLDS)
def test_a_tracked_step_holding_no_save_keeps_its_line_in_our_run(holds, tmp_path):
    run = _our_run(tmp_path)
    step = step_dir(run, 500)
    _fill(step, holds)
    (run / TRACKER_FILE).write_text("500\n")
    expected = f"{run / TRACKER_FILE}: names step 500, but {_own_line(step)}"
    for route in (run_steps.resume_step, resolve_checkpoint):  # train, inspect/export-hf
        with pytest.raises(CheckpointPathError) as caught:
            route(run)
        assert type(caught.value) is CheckpointPathError  # exit 2, as given directly
        assert str(caught.value) == expected
    validated = CliRunner().invoke(app, ["ckpt", "validate", str(run)])
    assert validated.exit_code == 2, validated.output
    assert expected in validated.output
    listed = run_steps.steps_here(run)
    assert listed == " (step dirs here: global_step_1, global_step_2, global_step_500)"
    assert run_steps.step_states(run, [step.name])[step.name] == run_steps.NOT_A_STEP


@pytest.mark.parametrize("piece", ["", "dist_ckpt"])
def test_a_tracked_save_that_did_not_finish_is_still_one_in_our_run(piece, tmp_path):
    run = _our_run(tmp_path)
    (step_dir(run, 500) / piece).mkdir(parents=True)
    (run / TRACKER_FILE).write_text("500\n")
    with pytest.raises(DamagedRunDirError, match="a save that did not finish"):
        run_steps.resume_step(run)
    assert "global_step_500 (a save that did not finish)" in run_steps.steps_here(run)


def test_a_step_past_the_tracker_is_refused_for_a_save_of_its_step(tmp_path):
    run = _our_run(tmp_path)
    (step_dir(run, 12) / "dist_ckpt").mkdir(parents=True)
    (run / TRACKER_FILE).write_text("2\n")
    with pytest.raises(DamagedRunDirError) as caught:
        run_steps.resume_step(run)
    assert str(caught.value).endswith(
        "and resuming step 2, a save of step 12 replaces it: move it away"
    )
    assert "this run's" not in str(caught.value)
