"""`safe_files.resolve_inside` refuses a link out of the root without looking outside.

Was: it called `os.path.realpath`, which looks up the link's target: a link to a missing
file outside said "file is missing", one to an existing file "resolves outside", which
told anyone who can edit a checkpoint whether a file out there exists (export --verify and
the other deep readers). Both now say "resolves outside", and links inside resolve as
before.
"""

from __future__ import annotations

import os

import pytest

from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError


@pytest.mark.parametrize("target", ["missing", "present"])
@pytest.mark.parametrize("spelt", ["absolute", "relative"])
def test_a_link_out_is_refused_whether_or_not_its_target_exists(tmp_path, target, spelt):
    outside = tmp_path / "outside"
    outside.mkdir()
    if target == "present":
        (outside / "secret.txt").write_text("x")
    root = tmp_path / "ckpt"
    (root / "huggingface").mkdir(parents=True)
    link = root / "huggingface" / "tokenizer.json"
    leads = outside / "secret.txt" if spelt == "absolute" else "../../outside/secret.txt"
    os.symlink(leads, link)
    with pytest.raises(CheckpointFileError) as caught:
        safe_files.regular_file(link, root)
    assert str(caught.value) == f"{link}: resolves outside the checkpoint"
    with pytest.raises(CheckpointFileError, match="resolves outside the model dir"):
        safe_files.resolve_inside(link, root / "huggingface", within="the model dir")


def test_links_inside_and_missing_files_read_as_before(tmp_path):
    root = tmp_path / "ckpt"
    (root / "huggingface").mkdir(parents=True)
    (root / "vocab.txt").write_text("a\n")
    os.symlink("../vocab.txt", root / "huggingface" / "vocab.txt")
    link = root / "huggingface" / "vocab.txt"
    assert safe_files.resolve_inside(link, root) == os.path.realpath(root / "vocab.txt")
    with pytest.raises(CheckpointFileError, match=r"tokenizer\.json: file is missing$"):
        safe_files.resolve_inside(root / "huggingface" / "tokenizer.json", root)
    os.symlink("loop", root / "loop")
    with pytest.raises(CheckpointFileError, match=r"loop: cannot resolve \(symlink loop\)$"):
        safe_files.resolve_inside(root / "loop", root)
