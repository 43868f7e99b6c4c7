"""`checkpoint.keep_last` removes only the step dirs the run's saves make, exactly as listed:
a step dir the user linked in, a hand-made `global_step_02` copy and a step that cannot be
removed all stay, and the save that prunes is saved (a pruning problem is a warning)."""

from __future__ import annotations

import logging
import os
import shutil

import pytest
import torch

from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.format import layout, run_steps


def save(run, step: int, keep_last: int | None = None) -> None:
    state = {"model": {"w": torch.full((4,), float(step))}}
    Checkpointer(run, strategy="none", keep_last=keep_last).save(step, state, contents=("model",))


def test_a_linked_step_is_neither_followed_nor_removed(tmp_path):
    """It failed the save that pruned ("Cannot call rmtree on a symbolic link"), after
    step 6 was committed; following the link would have deleted the user's copy."""
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    save(run, 2)
    save(run, 4)
    layout.step_dir(run, 2).rename(elsewhere)
    layout.step_dir(run, 2).symlink_to(elsewhere, target_is_directory=True)
    save(run, 6, keep_last=1)
    assert layout.step_dir(run, 2).is_symlink()
    assert (elsewhere / layout.MANIFEST_FILE).is_file()
    assert not layout.step_dir(run, 4).exists()  # linked steps do not count toward keep_last
    assert run_steps.read_tracker(run) == 6


def test_a_zero_padded_copy_is_no_step_and_stays(tmp_path):
    """global_step_02 was read as step 2: counted twice, the real global_step_2 removed, then
    removed "again" (FileNotFoundError failed the save)."""
    run = tmp_path / "run"
    save(run, 2)
    save(run, 4)
    shutil.copytree(layout.step_dir(run, 2), run / "global_step_02")
    save(run, 6, keep_last=2)
    assert run_steps.list_complete_steps(run) == [4, 6]
    assert (run / "global_step_02" / layout.MANIFEST_FILE).is_file()


def test_only_a_zero_padded_dir_names_no_step_to_resume(tmp_path):
    """Taken for step 6, whose global_step_6 was then missing: resume and validate failed."""
    run = tmp_path / "run"
    save(run, 6)
    layout.step_dir(run, 6).rename(run / "global_step_06")
    assert layout.parse_step_dir_name("global_step_06") is None
    assert layout.parse_step_dir_name("global_step_0") == 0
    assert layout.parse_step_dir_name("global_step_60") == 60
    (run / layout.TRACKER_FILE).unlink()
    assert run_steps.list_complete_steps(run) == []
    assert run_steps.resume_step(run) is None


@pytest.fixture
def undeletable(monkeypatch):
    """Make removing a directory fail as a disk or a permission makes it fail (EACCES), for
    the directories given: root ignores permission bits, and not every file system has
    `chattr +i`, so the removal itself is what fails here."""
    locked: set = set()  # (device, inode): a step is renamed before it is removed
    remove = shutil.rmtree

    def rmtree(path, *args, **kwargs):
        if os.path.lexists(path) and _identity(path) in locked:
            raise PermissionError(13, "Permission denied", str(path))
        remove(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", rmtree)
    return lambda dir_: locked.add(_identity(dir_))


def _identity(path) -> tuple[int, int]:
    stat = os.lstat(path)
    return stat.st_dev, stat.st_ino


def test_a_step_that_cannot_be_removed_is_a_warning_not_a_failed_save(
    tmp_path, undeletable, caplog
):
    run = tmp_path / "run"
    for step in (1, 2):
        save(run, step)
    undeletable(layout.step_dir(run, 1))
    with caplog.at_level(logging.WARNING, logger="mfsdp_ckpt.checkpointer"):
        save(run, 3, keep_last=1)  # step 3 is committed: this must not raise
    assert run_steps.read_tracker(run) == 3
    assert not layout.step_dir(run, 2).exists()  # the rest of the prune went on
    [line] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    left = run / f".global_step_1.removing-{os.getpid()}"  # out of the step names already
    assert line.startswith(f"warning: {left}: not removed by")
    assert line.endswith("step 3 is saved, and the next save tries again")
    assert run_steps.list_complete_steps(run) == [3]


def test_a_replaced_step_that_cannot_be_removed_is_a_warning_and_goes_later(
    tmp_path, monkeypatch, caplog
):
    """Re-saving a step swaps the new version in, then removes the old one: a removal that
    failed there failed the save, the new step in place and the tracker still at the step
    before. Now the save completes with a warning line, and the next save removes it."""
    run = tmp_path / "run"
    save(run, 1)
    save(run, 2)
    remove, old_version = shutil.rmtree, layout.tmp_step_dir(run, 2)
    failing = True

    def rmtree(path, *args, **kwargs):
        if failing and os.fspath(path) == os.fspath(old_version):
            raise PermissionError(13, "Permission denied", str(path))
        remove(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", rmtree)
    with caplog.at_level(logging.WARNING, logger="mfsdp_ckpt.checkpointer"):
        Checkpointer(run, strategy="none").save(
            2, {"model": {"w": torch.full((4,), 20.0)}}, contents=("model",)
        )
    assert run_steps.read_tracker(run) == 2
    [line] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert line.startswith(f"warning: {old_version}: the earlier global_step_2 that this save")
    assert line.endswith("(Permission denied); the next save tries again")
    assert old_version.is_dir()
    failing = False
    save(run, 3)
    assert not old_version.exists()
    assert run_steps.list_complete_steps(run) == [1, 2, 3]
