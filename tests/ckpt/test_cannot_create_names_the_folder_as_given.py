"""A full or read-only disk at an output's lock names the folder as the output was given:
`trainer.run_dir small/run: cannot create files in small (...)`, where it said the
absolute `/tmp/.../small` of a relative run dir (the folder is found through links, where
the lock file goes, and still named by the path the user typed)."""

from __future__ import annotations

import errno
import os

import pytest

from mfsdp_ckpt.errors import MfsdpError
from mfsdp_ckpt.storage import out_lock


@pytest.fixture
def failing_lock(monkeypatch):
    """Creating an output's lock file fails with the errno given."""
    real_open = os.open
    failure: list[int] = []

    def open_(path, *args, **kwargs):
        if os.fspath(path).endswith(out_lock.LOCK_SUFFIX) and failure:
            raise OSError(failure[0], os.strerror(failure[0]), os.fspath(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    return failure.append


def said(out: str, option: str) -> str:
    with pytest.raises(MfsdpError) as caught, out_lock.out_lock(out, option):
        pass
    return str(caught.value)


@pytest.mark.parametrize(
    ("out", "folder"), [("small/run", "small"), ("small/deeper/run/", "small/deeper"), ("run", ".")]
)
def test_a_relative_output_names_its_folder_relative(
    tmp_path, monkeypatch, failing_lock, out, folder
):
    monkeypatch.chdir(tmp_path)
    failing_lock(errno.ENOSPC)
    assert said(out, "trainer.run_dir") == (
        f"trainer.run_dir {out}: cannot create files in {folder} (No space left on device)"
    )


def test_a_read_only_folder_reached_through_a_link_is_named_by_the_link(
    tmp_path, monkeypatch, failing_lock
):
    (tmp_path / "real").mkdir()
    (tmp_path / "ro").symlink_to(tmp_path / "real", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    failing_lock(errno.EROFS)
    assert said("ro/hf", "--out") == (
        "--out ro/hf: cannot create files in ro (Read-only file system); choose another --out"
    )


def test_an_absolute_output_names_its_folder_absolute(tmp_path, failing_lock):
    failing_lock(errno.ENOSPC)
    out = tmp_path / "small" / "run"
    assert said(str(out), "--out") == (
        f"--out {out}: cannot create files in {out.parent} (No space left on device)"
    )
