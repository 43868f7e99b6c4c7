"""The error file a launched rank leaves for torchrun (`cli.errors._tell_torchrun`) is
written through a temp file made new (`mfsdp_ckpt.storage.temp_files.new_temp`).

Was: the temp file was `<error file>.<pid>.tmp`, opened with open(..., "w"): a symlink
placed there had the message written into the file it led to, and was then renamed onto
the error file itself."""

from __future__ import annotations

import json
import os

from cli.errors import _tell_torchrun


def test_a_link_at_the_old_temp_name_is_neither_written_through_nor_published(
    tmp_path, monkeypatch
):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious notes")
    error_file = tmp_path / "error.json"
    (tmp_path / f"error.json.{os.getpid()}.tmp").symlink_to(victim)
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    _tell_torchrun("rank 1 failed")
    assert victim.read_text() == "precious notes"
    assert error_file.is_file() and not error_file.is_symlink()
    assert json.loads(error_file.read_text())["message"] == "rank 1 failed"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "error.json",
        f"error.json.{os.getpid()}.tmp",
        "victim.txt",
    ]  # no temp file of its own left


def test_an_error_file_that_cannot_be_written_is_no_second_error(tmp_path, monkeypatch):
    """The rank's own line says what failed; a missing folder for torchrun's file must not
    end it with a traceback instead."""
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(tmp_path / "gone" / "error.json"))
    _tell_torchrun("rank 1 failed")
    assert list(tmp_path.iterdir()) == []
