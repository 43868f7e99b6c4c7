"""An --out whose name is near the file system's limit (255 bytes) is legal: the hidden
lock file and work dir beside it must still fit."""

import os

from mfsdp_ckpt.storage.out_dir import claim_output
from mfsdp_ckpt.storage.out_lock import lock_path_for, out_lock
from tests.support.export_marks import marked_weights


def _hidden_names(parent) -> list[str]:
    return [name for name in os.listdir(parent) if name.startswith(".")]


def test_a_255_byte_out_is_claimed_and_published_twice(tmp_path):
    out = tmp_path / ("b" * 55 + "é" * 100)  # 255 bytes, cut between two characters
    for overwrite in (False, True):
        with claim_output(out, overwrite) as claim:
            hidden = _hidden_names(tmp_path)  # the lock and the work dir
            assert len(hidden) == 2 and lock_path_for(out).exists()
            assert all(len(os.fsencode(name)) <= 255 and name.isprintable() for name in hidden)
            (claim.tmp / "config.json").write_text("{}")
            marked_weights(claim.tmp)
            claim.publish()
    assert os.listdir(tmp_path) == [out.name]


def test_long_names_alike_but_for_their_end_get_their_own_lock(tmp_path):
    first, second = tmp_path / ("a" * 250 + "1"), tmp_path / ("a" * 250 + "2")
    assert lock_path_for(first) != lock_path_for(second)
    with out_lock(first), out_lock(second):  # a data command's --out
        assert len(os.listdir(tmp_path)) == 2
