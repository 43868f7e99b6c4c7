"""`out_dir`'s path helpers that the demo and the training launcher use as well as
`claim_output`: public, so that every command checks and makes its output the same way."""

from __future__ import annotations

import pytest

from mfsdp_ckpt.storage.out_dir import OutputDirError, checked_target, make_parents, remove_empty


def test_made_parents_are_removed_while_empty_innermost_first(tmp_path):
    out = tmp_path / "a" / "b" / "c" / "out"
    made = make_parents(out)
    assert made == [tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "c"]
    (tmp_path / "a" / "kept.txt").write_text("written meanwhile")
    remove_empty(made)
    assert not (tmp_path / "a" / "b").exists()
    assert (tmp_path / "a" / "kept.txt").is_file()
    assert make_parents(tmp_path / "a" / "out") == []  # parents that were there are not made


def test_a_symlink_or_a_file_is_no_output_target(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path)
    assert checked_target(tmp_path / "new") == tmp_path / "new"
    for bad, words in (("file", "not a directory"), ("link", "symlink"), ("file/x", "is a file")):
        with pytest.raises(OutputDirError, match=words):
            checked_target(tmp_path / bad)
