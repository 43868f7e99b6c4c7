"""Where an output cannot go, said before any work and in the user's own terms.

* `--out` that is a mount point (a container's `-v host:/out`) cannot be replaced: an export
  or import into it converted everything into a work dir on the parent's filesystem, then
  failed with a bare "Device or resource busy" (exit 1) at the final swap. Refused at the
  claim, exit 2, naming a directory inside it. `/proc` is the mount point used: procfs is
  mounted there on every Linux, for root and for any other user alike.
* the free-space refusal named the work dir's filesystem as the output's own ("its
  filesystem has N free"); it names where the filesystem written is mounted.
* a second command into a busy `--out` named its absolute path, where every other --out
  message uses the path as given (README: relative where the path given was).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from mfsdp_ckpt.format.dtypes import FLOAT32
from mfsdp_ckpt.storage.file_errors import os_error_line
from mfsdp_ckpt.storage.out_dir import OutputDirError, checked_target, claim_output
from mfsdp_ckpt.storage.out_lock import (
    OutputBusyError,
    acquire_out_lock,
    out_lock,
    release_out_lock,
)
from mfsdp_ckpt.storage.safetensors_writer import ShardedSafetensorsWriter
from tests.support.fresh_python import mfsdp

MOUNTED = Path("/proc")


def test_every_linux_mounts_the_path_used():
    assert os.path.ismount(MOUNTED)


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_mount_point_is_refused_at_the_claim(overwrite):
    before = sorted(os.listdir(MOUNTED.parent))
    with pytest.raises(OutputDirError) as refused:
        claim_output(MOUNTED, overwrite=overwrite)
    assert str(refused.value) == (
        "/proc: is a mount point, which cannot be replaced; name a new directory inside it"
        " (e.g. /proc/model)"
    )
    assert sorted(os.listdir(MOUNTED.parent)) == before  # no lock file, no work dir


def test_a_mount_point_is_named_as_given(monkeypatch):
    monkeypatch.chdir(MOUNTED.parent)
    with pytest.raises(OutputDirError, match=r"^proc: is a mount point.*\(e\.g\. proc/model\)$"):
        checked_target(Path(MOUNTED.name))


def test_a_directory_inside_a_mount_point_is_no_mount_point(tmp_path):
    assert checked_target(tmp_path / "model") == tmp_path / "model"


def test_the_space_refusal_names_the_filesystem_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    too_big = [("w", FLOAT32, (1 << 50,))]
    with pytest.raises(OSError) as refused, claim_output("out") as claim:
        ShardedSafetensorsWriter(claim.tmp, too_big, 1 << 60).open()
    said = os_error_line(refused.value)  # the command's error line, less `error: `
    found = re.fullmatch(
        r"out: \d+ bytes to write, the filesystem it is written on \(mounted at (.+)\) has"
        r" \d+ free \(No space left on device\)",
        said,
    )
    assert found, said
    mounted = Path(found.group(1))
    assert os.path.ismount(mounted)
    assert mounted == tmp_path or mounted in tmp_path.parents
    assert os.stat(mounted).st_dev == os.stat(tmp_path).st_dev
    assert sorted(os.listdir(tmp_path)) == []


def test_a_busy_out_is_named_as_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    held = acquire_out_lock(tmp_path / "sub" / "out")
    try:
        with pytest.raises(OutputBusyError, match=r"^sub/out: another command is writing it"):
            claim_output("sub/out", overwrite=True)
        with (
            pytest.raises(OutputBusyError, match=r"^sub/out: another command is writing it"),
            out_lock("sub/out"),
        ):
            pass
        done = mfsdp("data", "synthetic", "--out", "sub/out", cwd=tmp_path)
    finally:
        release_out_lock(tmp_path / "sub" / "out", held)
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        f"error: sub/out: another command is writing it (pid {os.getpid()}); wait for it or"
        " choose another --out\n"
    )
