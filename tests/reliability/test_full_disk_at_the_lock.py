"""A full disk when a command takes its output's lock (`trainer.run_dir`, `--out`): one line
naming the output and its folder, and no lock file left (was: `[Errno 28] No space left on
device`, naming no file, from writing the pid into the lock file)."""

from __future__ import annotations

import errno
import os

import pytest

from mfsdp_ckpt.errors import EXIT_FAILED, MfsdpFailedError
from mfsdp_ckpt.storage import out_lock


def test_a_full_disk_when_the_lock_is_taken_names_the_run_dir(tmp_path, monkeypatch):
    def full_disk(*_args: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full_disk)
    run = tmp_path / "run"
    with pytest.raises(MfsdpFailedError) as caught, out_lock.out_lock(run, "trainer.run_dir"):
        pass
    assert str(caught.value) == (
        f"trainer.run_dir {run}: cannot create files in {tmp_path} (No space left on device)"
    )
    assert caught.value.exit_code == EXIT_FAILED
    assert os.listdir(tmp_path) == []  # the lock file is removed with the lock
