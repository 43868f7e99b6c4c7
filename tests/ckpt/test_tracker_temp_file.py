"""The tracker's temp file is created new: nothing already at its name is written through."""

from __future__ import annotations

import os

import pytest

from mfsdp_ckpt.format import layout, step_saving
from mfsdp_ckpt.storage import temp_files


def test_a_link_at_the_pid_named_temp_file_is_not_written_through(tmp_path):
    """The temp name was `.latest_checkpointed_iteration.txt.<pid>.tmp`: a symlink placed
    there made the tracker write the step into the file it led to."""
    victim = tmp_path / "notes.txt"
    victim.write_text("mine\n")
    run = tmp_path / "run"
    run.mkdir()
    link = run / f".{layout.TRACKER_FILE}.{os.getpid()}.tmp"
    link.symlink_to(victim)
    step_saving.write_tracker(run, 7)
    assert victim.read_text() == "mine\n"
    assert (run / layout.TRACKER_FILE).read_text() == "7\n"
    assert link.is_symlink() and not (run / layout.TRACKER_FILE).is_symlink()


def test_a_link_at_the_temp_name_itself_fails_the_write_and_is_left(tmp_path, monkeypatch):
    """Should the random name be taken (by a link), the open fails (O_EXCL, O_NOFOLLOW): the
    file it leads to, the link and the old tracker are left as they were."""
    victim = tmp_path / "notes.txt"
    victim.write_text("mine\n")
    run = tmp_path / "run"
    run.mkdir()
    step_saving.write_tracker(run, 3)
    monkeypatch.setattr(temp_files.secrets, "token_hex", lambda nbytes: "0" * 16)
    link = run / f".{layout.TRACKER_FILE}.{os.getpid()}-{'0' * 16}.tmp"
    link.symlink_to(victim)
    with pytest.raises(FileExistsError):
        step_saving.write_tracker(run, 7)
    assert victim.read_text() == "mine\n"
    assert link.is_symlink()
    assert (run / layout.TRACKER_FILE).read_text() == "3\n"
