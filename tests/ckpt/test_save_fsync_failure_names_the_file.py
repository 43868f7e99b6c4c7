"""A save whose fsync fails names the file or directory that could not be flushed, not
only the step's temp dir: `fsync` of a descriptor raises an OSError naming no file, and the
line read `.../global_step_1.tmp: saving step 1 failed: Input/output error`.

The disk's failure is injected at the system-call boundary (`os.fsync`, for the one path
named), since no local filesystem fails an fsync on demand."""

from __future__ import annotations

import errno
import os

import pytest
import torch

from mfsdp_ckpt.checkpoint_failures import CheckpointSaveError
from mfsdp_ckpt.checkpointer import Checkpointer

STATE = {"model": {"w": torch.ones(2)}}


def _fsync_fails_for(monkeypatch, path: str) -> None:
    """`os.fsync` of a descriptor open on `path` fails as a disk's I/O error does."""
    fsync = os.fsync

    def failing(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}") == path:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", failing)


@pytest.mark.parametrize("name", ["dist_ckpt/.metadata", "dist_ckpt", "."])
def test_a_failed_fsync_during_a_save_names_what_was_not_flushed(tmp_path, monkeypatch, name):
    run = tmp_path / "run"
    tmp = run / "global_step_1.tmp"
    failed = os.path.normpath(tmp / name)
    _fsync_fails_for(monkeypatch, failed)
    with pytest.raises(CheckpointSaveError) as caught:
        Checkpointer(run, strategy="none").save(1, STATE, contents=("model",))
    assert str(caught.value) == (f"{tmp}: saving step 1 failed: {failed}: {os.strerror(errno.EIO)}")
    assert not tmp.exists()
    assert not (run / "global_step_1").exists()
