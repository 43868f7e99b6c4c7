"""The one gate every small checkpoint file passes: regular files only, inside the checkpoint,
bounded. Each refusal must happen without blocking (a FIFO) or reading without end (/dev/zero)."""

from __future__ import annotations

import os

import pytest

from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.safe_files import read_bytes, read_text, regular_file


def test_reads_a_regular_file_inside_the_root(tmp_path):
    (tmp_path / "a.json").write_bytes(b"{}")
    assert read_bytes(tmp_path / "a.json", limit=10, root=tmp_path) == b"{}"
    os.symlink("a.json", tmp_path / "link.json")  # a link that stays inside is fine
    assert read_text(tmp_path / "link.json", limit=10, root=tmp_path) == "{}"


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda p: os.mkfifo(p), "FIFO"),
        (lambda p: os.symlink("/dev/zero", p), "outside the checkpoint"),
        (lambda p: os.mkdir(p), "directory"),
        (lambda p: os.symlink(p.name, p), "symlink loop"),
    ],
)
def test_refuses_what_is_not_a_regular_file_inside(tmp_path, make, words):
    target = tmp_path / "manifest.json"
    make(target)
    with pytest.raises(CheckpointFileError, match=words):
        read_bytes(target, limit=1 << 20, root=tmp_path)


def test_refuses_a_symlink_out_of_the_checkpoint(tmp_path):
    secret = tmp_path / "home" / "secret"
    secret.parent.mkdir()
    secret.write_text("token")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    os.symlink(secret, ckpt / "config.json")
    with pytest.raises(CheckpointFileError, match="outside the checkpoint"):
        read_text(ckpt / "config.json", limit=100, root=ckpt)
    assert regular_file(ckpt / "config.json")  # without a root, only the kind is checked


def test_bounds_size_and_encoding(tmp_path):
    big = tmp_path / "big"
    with open(big, "wb") as handle:
        handle.truncate(3 << 30)  # sparse: 3 GiB claimed, nothing may be read
    with pytest.raises(CheckpointFileError, match="more than the 1024"):
        read_bytes(big, limit=1024)
    (tmp_path / "latin").write_bytes(b"\xff\xfe7")
    with pytest.raises(CheckpointFileError, match="not UTF-8"):
        read_text(tmp_path / "latin", limit=10)
    with pytest.raises(CheckpointFileError, match="missing"):
        read_bytes(tmp_path / "nope", limit=10)
