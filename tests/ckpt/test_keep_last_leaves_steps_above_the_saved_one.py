"""`checkpoint.keep_last` counts and removes only steps at or below the one just saved.

A run resumed below newer complete steps (a tracker set back, saves interrupted) saves
under them; resume names those as left beside until a save of their step replaces them.
Counted, they were the "newest" that keep_last kept, and the prune deleted the run's own
steps and the other history's older ones: with steps 1-12 and keep_last=3, a save of step 6
left 6, 10, 11 and 12."""

from __future__ import annotations

import torch

from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.format import layout


def _save(run, step: int, keep_last: int | None = None) -> None:
    state = {"model": {"w": torch.full((4,), float(step))}}
    Checkpointer(run, strategy="none", keep_last=keep_last).save(step, state, contents=("model",))


def _steps(run) -> list[int]:
    return sorted(
        step
        for path in run.iterdir()
        if (step := layout.parse_step_dir_name(path.name)) is not None
    )


def test_a_save_below_newer_steps_keeps_them_and_its_own_newest(tmp_path):
    run = tmp_path / "run"
    for step in range(1, 13):
        _save(run, step)
    _save(run, 6, keep_last=3)  # a resumed run's save of step 6, below steps 7-12
    assert _steps(run) == [4, 5, 6, 7, 8, 9, 10, 11, 12]
    assert all((layout.step_dir(run, s) / layout.MANIFEST_FILE).is_file() for s in _steps(run))


def test_a_save_above_every_step_prunes_as_before(tmp_path):
    run = tmp_path / "run"
    for step in range(1, 6):
        _save(run, step)
    _save(run, 6, keep_last=2)
    assert _steps(run) == [5, 6]
