"""validate and a resume hold a checkpoint's trainer state (`extra`) to one rule
(`mfsdp_ckpt.format.trainer_state`), so that "valid" means resumable: a state without
`extra.step` was "valid" and its resume a KeyError traceback; a seed of "0" or a NaN digest
passed validate and the resume refused it; a row count of -5 or a batch size of 0 was
refused as a config change (exit 2) where the checkpoint was damaged; a shuffle flag of 2
was warned about as "data.shuffle=true but ... trained with data.shuffle=true"."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.check.validate import CheckpointInvalidError, validate_checkpoint
from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.format import layout
from trainer.resume import new_progress
from trainer.resume_state import check_trainer_state

STEP = 3


def _state(**edits: object) -> dict[str, object]:
    """A trainer's state at step 3 (`new_progress`), with `edits` (None: the field left out)."""
    state: dict[str, object] = {**new_progress(8, 16, 0, 123, True, 456, 789), "step": STEP}
    state.update(edits)
    return {key: value for key, value in state.items() if value is not None}


DAMAGED = {
    "no step": ({"step": None}, "has no extra.step"),
    "no row count": ({"train_rows": None}, "has no extra.train_rows"),
    "a seed string": ({"seed": "0"}, "holds seed='0', not an integer"),
    "a NaN digest": ({"rows_digest": float("nan")}, "holds rows_digest=nan, not an integer"),
    "negative rows": ({"train_rows": -5}, "holds train_rows=-5, but a row count is 1 or more"),
    "batch size 0": (
        {"global_batch_size": 0},
        "holds global_batch_size=0, but a batch size is 1 or more",
    ),
    "shuffle 2": ({"shuffle": 2}, "holds shuffle=2, not 0 or 1"),
    "shuffle 1.0": ({"shuffle": 1.0}, "holds shuffle=1.0, not 0 or 1"),
}


def _saved(root: Path, state: dict[str, object]) -> Path:
    Checkpointer(root, strategy="none").save(
        STEP, {"model": {"w": torch.ones(4, 4)}, "extra": state}, contents=("model", "extra")
    )
    return layout.step_dir(root, STEP)


def _validate_errors(run: Path) -> list[str]:
    report = validate_checkpoint(run)
    return [f.message for f in report.findings if f.severity == "error"]


@pytest.mark.parametrize("case", list(DAMAGED))
def test_validate_and_resume_refuse_the_same_damage(tmp_path, case):
    edits, why = DAMAGED[case]
    step = _saved(tmp_path, _state(**edits))
    assert _validate_errors(tmp_path) == [f"its trainer state {why}"]
    paths = layout.CheckpointPaths(dist_ckpt=step / layout.DIST_CKPT_DIR, step_dir=step)
    with pytest.raises(CheckpointInvalidError) as caught:
        check_trainer_state(_state(**edits), paths, None)
    assert str(caught.value) == (
        f"{step}: its trainer state {why}; refusing to resume from it (damaged or edited)"
    )
    assert caught.value.exit_code == 1


@pytest.mark.parametrize("shuffle", [0, 1, True, False])
def test_a_state_a_trainer_saved_is_valid_and_resumable(tmp_path, shuffle):
    step = _saved(tmp_path, _state(shuffle=shuffle))
    assert _validate_errors(tmp_path) == []
    paths = layout.CheckpointPaths(dist_ckpt=step / layout.DIST_CKPT_DIR, step_dir=step)
    check_trainer_state(_state(shuffle=shuffle), paths, None)


def test_a_state_of_the_callers_own_needs_only_its_step(tmp_path):
    """A `Checkpointer` save of a state no `mfsdp train` wrote: its other fields are its own."""
    _saved(tmp_path, {"step": STEP, "tokens_seen": "many"})
    assert _validate_errors(tmp_path) == []


def test_a_bare_dcp_dir_of_another_tools_keys_needs_no_step(tmp_path):
    """A DCP dir saved without mfsdp (no manifest) holding `extra.*` keys of its own."""
    import torch.distributed.checkpoint as dcp

    state = {"model.w": torch.ones(2), "extra.cfg": {"lr": 1e-5}}
    dcp.save(state, checkpoint_id=tmp_path / "ckpt", no_dist=True)
    assert _validate_errors(tmp_path / "ckpt") == []
