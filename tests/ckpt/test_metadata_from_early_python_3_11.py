"""Checkpoints saved by early CPython 3.11 releases (3.11.2, Debian 12's python3.11) read.

Those Pythons pickle an Enum member as `getattr(cls, name)`; later ones as `cls(value)`.
Every DCP `.metadata` holds DCP's `_MEM_FORMAT_ENCODING` member, so every checkpoint saved
there (mfsdp's own, verl's, Megatron-LM's) was refused: "refusing to load global
builtins.getattr: not an admitted type", by validate, export and a training resume.
"""

from __future__ import annotations

import enum

import pytest
import torch
import torch.distributed.checkpoint as dcp

from mfsdp_ckpt.format.dcp_metadata import UnsafeMetadataError, load_plain_metadata_bytes
from tests.support.interop_layouts import run_cli
from tests.support.metadata_reads import load_metadata_bytes


def _getattr_reduction(self, protocol):
    return getattr, (type(self), self.name)


@pytest.fixture
def early_3_11_save(tmp_path, monkeypatch):
    """A DCP save with enum members pickled as CPython 3.11.2 pickles them."""
    monkeypatch.setattr(enum.Enum, "__reduce_ex__", _getattr_reduction)
    state = {"model": {"w": torch.arange(6.0).reshape(2, 3)}, "step": 3}
    with pytest.warns(UserWarning):  # one process, no process group
        dcp.save(state, checkpoint_id=str(tmp_path / "dist_ckpt"))
    monkeypatch.undo()
    data = (tmp_path / "dist_ckpt" / ".metadata").read_bytes()
    assert b"builtins\ngetattr" in data or b"\x8c\x08builtins\x94\x8c\x07getattr" in data
    return tmp_path / "dist_ckpt"


def test_such_a_checkpoint_validates_and_loads(early_3_11_save):
    code, stdout, err = run_cli("ckpt", "validate", "--deep", early_3_11_save)
    assert code == 0 and stdout.splitlines()[-1].startswith("valid:"), stdout + err
    data = (early_3_11_save / ".metadata").read_bytes()
    plain = load_plain_metadata_bytes(data, "x").state_dict_metadata["model.w"].properties
    assert plain.memory_format.name == "TORCH_CONTIGUOUS_FORMAT"
    dcp_own = load_metadata_bytes(data, "x").state_dict_metadata["model.w"].properties
    assert dcp_own.memory_format == torch.contiguous_format


def test_getattr_of_anything_but_an_enum_member_is_refused(early_3_11_save):
    data = (early_3_11_save / ".metadata").read_bytes()
    name = b"TORCH_CONTIGUOUS_FORMAT"
    hostile = data.replace(name, b"__class__".ljust(len(name), b"_"))  # no member's name
    assert len(hostile) == len(data)
    with pytest.raises(UnsafeMetadataError):
        load_plain_metadata_bytes(hostile, "x")
