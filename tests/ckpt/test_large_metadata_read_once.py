"""inspect and validate read a large `.metadata` once: naming the layout of a DCP dir no
layout's names claim reads it in full (is it torchtitan's?), and the command's reader
takes what that read instead of unpickling and checking the file again (minutes for a
large run's). A file replaced or rewritten between the two is read again."""

from __future__ import annotations

import os
import shutil

import pytest
import torch
from click.testing import CliRunner

from cli.main import app
from mfsdp_ckpt.format import dcp_metadata
from mfsdp_ckpt.format.torchtitan import is_torchtitan_dcp
from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.support.megatron_checkpoints import save_dcp
from tests.support.metadata_reads import metadata_reads


def _large(tmp_path):
    """A DCP whose `.metadata` reaches the progress threshold at no cost: bytes after the
    pickle's STOP (a sparse tail), which the reader counts but never reads."""
    ckpt = save_dcp({"model": {"w": torch.ones(4)}}, tmp_path / "ck")
    os.truncate(ckpt / ".metadata", dcp_metadata.PROGRESS_FROM_BYTES)
    return ckpt


@pytest.mark.parametrize("command", ["inspect", "validate"])
def test_a_command_reads_and_checks_the_metadata_once(tmp_path, monkeypatch, command):
    ckpt = _large(tmp_path)
    reads = metadata_reads(monkeypatch)
    done = CliRunner().invoke(app, ["ckpt", command, str(ckpt)])
    metadata = ckpt / ".metadata"
    lines = done.stderr.splitlines()
    assert lines.count(f"reading {metadata} (16.0 MiB) ...") == 1, done.stderr
    assert lines.count(f"checking what {metadata} lists ...") == 1, done.stderr
    assert reads == [str(metadata)], reads
    assert done.exit_code in (0, 1) and "Traceback" not in done.output, done.output


def test_what_detection_read_is_taken_once_by_the_next_reader(tmp_path, monkeypatch):
    ckpt = _large(tmp_path)
    reads = metadata_reads(monkeypatch)
    assert not is_torchtitan_dcp(ckpt)
    assert CheckpointReader(ckpt).tensors.keys() == {"model.w"}
    assert len(reads) == 1  # the reader took what detection read
    CheckpointReader(ckpt)
    assert len(reads) == 2  # taken, not kept: a later reader reads the file afresh


@pytest.mark.parametrize("change", ["replaced", "touched"])
def test_a_file_changed_after_detection_is_read_again(tmp_path, monkeypatch, change):
    ckpt = _large(tmp_path)
    metadata = ckpt / ".metadata"
    other = save_dcp({"model": {"v": torch.ones(2)}}, tmp_path / "other")
    reads = metadata_reads(monkeypatch)
    assert not is_torchtitan_dcp(ckpt)
    if change == "replaced":  # a new file under the same name: another inode
        shutil.copyfile(other / ".metadata", tmp_path / "new")
        os.replace(tmp_path / "new", metadata)
        expected = {"model.v"}
    else:  # the same inode and size, a new mtime
        stat = metadata.stat()
        os.utime(metadata, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        expected = {"model.w"}
    assert CheckpointReader(ckpt).tensors.keys() == expected
    assert reads == [str(metadata)] * 2, reads
