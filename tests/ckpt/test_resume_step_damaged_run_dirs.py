"""`checkpoint.resume=auto` never takes a run dir for one with nothing to resume while it
holds step data, and a save never moves or removes a file standing at a step's name.

A tracker naming a damaged step was refused when another complete step was there, but
with none it meant "no checkpoint": the run trained from step 0 and saved over the damaged
step. A file at `global_step_2` was likewise ignored, then moved aside and removed by the
save of step 2 as if it were an old step dir, which failed that save half done.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.checkpoint_failures import CheckpointSaveError
from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.format import layout, run_steps, step_saving

STATE = {"model": {"w": torch.ones(2)}}


def _step(run: Path, step: int, complete: bool = True) -> Path:
    """A step dir as mfsdp leaves it (a manifest marks it complete) or without its manifest
    (damaged, or written by verl, whose steps have none)."""
    path = layout.step_dir(run, step)
    (path / layout.DIST_CKPT_DIR).mkdir(parents=True)
    if complete:
        (path / layout.MANIFEST_FILE).write_text("{}")
    return path


def _run(tmp_path: Path, complete: list[int], tracked: int | None = None) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    for step in complete:
        _step(run, step)
    if tracked is not None:
        step_saving.write_tracker(run, tracked)
    return run


@pytest.mark.parametrize("others", [[], [1]], ids=["only-step", "with-an-older-one"])
def test_a_tracked_step_without_its_manifest_is_refused_whatever_else_is_there(tmp_path, others):
    """Was: with no other complete step, None ("no checkpoint"), and the run saved over it."""
    run = _run(tmp_path, others, tracked=2)
    _step(run, 2, complete=False)
    instead = "move it away to resume from step 1" if others else "move it and the tracker away"
    with pytest.raises(layout.DamagedRunDirError) as caught:
        run_steps.resume_step(run)
    assert str(caught.value).startswith(
        f"{run}/latest_checkpointed_iteration.txt: names step 2, but {run}/global_step_2 holds"
        f" no manifest.json, which mfsdp writes last (a save that did not finish); {instead}"
    )


@pytest.mark.parametrize("tracked", [2, None], ids=["tracked", "untracked"])
def test_a_file_at_a_step_name_is_refused_naming_it(tmp_path, tracked):
    run = _run(tmp_path, [], tracked=tracked)
    layout.step_dir(run, 2).write_text("hi\n")
    with pytest.raises(layout.DamagedRunDirError, match=r"global_step_2 is a file, not a step dir"):
        run_steps.resume_step(run)


def test_a_tracker_whose_step_is_gone_with_nothing_complete_is_refused(tmp_path):
    """A tracker says a step was saved: with no step left it is not "nothing to resume"
    (nor is it for verl's or Megatron-LM's tracker of a dir of theirs)."""
    run = _run(tmp_path, [], tracked=2)
    with pytest.raises(layout.DamagedRunDirError) as caught:
        run_steps.resume_step(run)
    assert str(caught.value) == (
        f"{run}/latest_checkpointed_iteration.txt: names step 2, but {run}/global_step_2 is"
        " missing (no step dirs here) and no step is complete; move the tracker away to start"
        " afresh, or give checkpoint.resume=PATH"
    )
    (run / "iter_0000002").mkdir()
    with pytest.raises(layout.DamagedRunDirError, match=r"step dirs here: iter_0000002"):
        run_steps.resume_step(run)


def test_a_removed_tracked_step_still_falls_back_to_the_newest_complete_one(tmp_path):
    run = _run(tmp_path, [1, 3], tracked=5)
    assert run_steps.resume_step(run) == 3


def test_step_data_without_a_tracker_is_no_fresh_start(tmp_path):
    """An untracked incomplete step dir (verl's SFT layout, or mfsdp's with its manifest
    lost) and a Megatron-LM iteration dir: a run starting afresh saves over the one and
    writes its tracker over the other's."""
    run = _run(tmp_path, [])
    verl = _step(run, 4, complete=False)
    (verl / layout.HF_ASSETS_DIR).mkdir()
    (verl / "data_0.pt").write_bytes(b"")
    with pytest.raises(layout.DamagedRunDirError) as caught:
        run_steps.resume_step(run)
    assert str(caught.value) == (
        f"{verl} holds no manifest.json, which mfsdp writes last (a save that did not finish),"
        " and a run starting afresh here saves over it: move it away"
    )
    shutil.rmtree(verl)
    (run / "iter_0000100").mkdir()
    with pytest.raises(layout.DamagedRunDirError, match=r"iter_0000100 is a Megatron-LM checkp"):
        run_steps.resume_step(run)


def test_only_what_a_resumed_run_saves_over_is_refused(tmp_path):
    """Past the resumed step an incomplete dir is saved over; older ones, an unfinished
    save's .tmp and a linked step (a save replaces the link only) are left as they are."""
    run = _run(tmp_path, [2], tracked=2)
    _step(run, 1, complete=False)
    layout.tmp_step_dir(run, 3).mkdir()
    (run / "global_step_4").symlink_to(tmp_path / "elsewhere")
    assert run_steps.resume_step(run) == 2
    _step(run, 3, complete=False)
    with pytest.raises(layout.DamagedRunDirError) as caught:
        run_steps.resume_step(run)
    assert str(caught.value).endswith(
        "and resuming step 2, a save of step 3 replaces it: move it away"
    )


def test_an_empty_run_dir_or_none_resumes_nothing(tmp_path):
    assert run_steps.resume_step(tmp_path / "none") is None
    run = _run(tmp_path, [])
    (run / "metrics.jsonl").write_text("")
    layout.tmp_step_dir(run, 1).mkdir()  # a save killed before it finished
    assert run_steps.resume_step(run) is None


@pytest.mark.parametrize("kind", ["file", "fifo"])
def test_a_save_leaves_a_file_at_its_step_name_alone(tmp_path, kind):
    """Was: the file moved to `.global_step_2.old-PID`, then "NotADirectoryError" when it
    was removed as a directory: the save failed with the new step in place and the tracker
    still at step 1."""
    run = tmp_path / "run"
    saver = Checkpointer(run, strategy="none")
    saver.save(1, STATE, contents=("model",))
    target = layout.step_dir(run, 2)
    if kind == "file":
        target.write_text("hi\n")
    else:
        os.mkfifo(target)
    with pytest.raises(CheckpointSaveError) as caught:
        saver.save(2, STATE, contents=("model",))
    what = "is a file, not a step dir" if kind == "file" else "is not a directory"
    assert str(caught.value).endswith(f"{target} {what}: move it away")
    assert sorted(p.name for p in run.iterdir()) == [
        "global_step_1",
        "global_step_2",
        "latest_checkpointed_iteration.txt",
    ]
    assert run_steps.read_tracker(run) == 1
    if kind == "file":
        assert target.read_text() == "hi\n"


def test_a_save_replaces_a_step_dir_and_a_link_as_before(tmp_path):
    run = tmp_path / "run"
    saver = Checkpointer(run, strategy="none")
    saver.save(2, STATE, contents=("model",))
    saver.save(2, STATE, contents=("model",))  # re-saving a step replaces it whole
    elsewhere = tmp_path / "elsewhere"
    layout.step_dir(run, 2).rename(elsewhere)
    layout.step_dir(run, 2).symlink_to(elsewhere, target_is_directory=True)
    saver.save(2, STATE, contents=("model",))
    assert not layout.step_dir(run, 2).is_symlink()
    assert (elsewhere / layout.MANIFEST_FILE).is_file()  # what the link led to stays
    assert sorted(p.name for p in run.iterdir()) == [
        "global_step_2",
        "latest_checkpointed_iteration.txt",
    ]
