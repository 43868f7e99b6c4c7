"""The temp files a command writes and renames into place (`temp_files.new_temp`):
made new under a random name, so nothing placed at a name beforehand is ever opened.

Was: `mfsdp data` opened `.<table>.tmp-<pid>` with open(..., "wb"), and a symlink planted
there had the table written into the file it led to, outside --out, and was then renamed
onto the table itself; a launched rank's error file for torchrun alike."""

from __future__ import annotations

import os

import pytest

from mfsdp_ckpt.storage import temp_files
from mfsdp_ckpt.storage.temp_files import new_temp, temp_writer


def test_a_temp_file_is_made_new_and_hidden_beside_its_file(tmp_path):
    target = tmp_path / "train.parquet"
    temp, fd = new_temp(target)
    os.close(fd)
    assert temp.parent == tmp_path and temp.name.startswith(".train.parquet.")
    assert temp.is_file() and not temp.is_symlink() and temp.stat().st_size == 0
    assert temp_writer(target, temp.name) == os.getpid()
    other, fd = new_temp(target)
    os.close(fd)
    assert other != temp  # a random name each time


def test_a_link_at_the_temp_name_is_never_opened(tmp_path, monkeypatch):
    """Only a name known in advance can hold something planted: made so here, it is refused
    rather than opened through."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious notes")
    monkeypatch.setattr(temp_files.secrets, "token_hex", lambda _n: "0" * 16)
    target = tmp_path / "train.parquet"
    planted = tmp_path / f".train.parquet.{os.getpid()}-{'0' * 16}.tmp"
    planted.symlink_to(victim)
    with pytest.raises(FileExistsError):
        new_temp(target)
    dangling = tmp_path / "dangling"
    planted.unlink()
    planted.symlink_to(dangling)  # O_CREAT alone would create the file the link names
    with pytest.raises(FileExistsError):
        new_temp(target)
    assert victim.read_text() == "precious notes" and not dangling.exists()


@pytest.mark.parametrize(
    "name",
    [
        "train.parquet",
        ".train.parquet.tmp-123",  # another name scheme: not this one's to remove
        ".train.parquet.123-0123456789abcdef.tmp.x",
        ".train.parquet.x-0123456789abcdef.tmp",
        ".other.parquet.123-0123456789abcdef.tmp",
        ".train.parquet.123-0123456789abcde.tmp",
    ],
)
def test_only_a_temp_files_own_name_names_its_writer(tmp_path, name):
    assert temp_writer(tmp_path / "train.parquet", name) is None
