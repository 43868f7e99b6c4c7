"""Hostile inputs the type checks surfaced: each is refused with its documented error and a
message that names the problem, not a stray TypeError."""

import json
import struct

import pytest

from mfsdp_ckpt.errors import UnsafeMetadataError
from mfsdp_ckpt.format.dcp_metadata import load_plain_metadata_bytes
from mfsdp_ckpt.storage.safetensors_source import SafetensorsError, read_header


def test_a_pickle_calling_none_is_refused_as_not_admitted():
    # PROTO 2, NONE, EMPTY_TUPLE, REDUCE, STOP: "call None()"
    with pytest.raises(UnsafeMetadataError, match="refusing to call NoneType"):
        load_plain_metadata_bytes(b"\x80\x02N)R.", "run/.metadata")


@pytest.mark.parametrize("dtype", [["F32"] * 1000, {"F32": 1}])
def test_a_safetensors_dtype_that_is_not_a_string_is_refused(tmp_path, dtype):
    header = json.dumps({"w": {"dtype": dtype, "shape": [1], "data_offsets": [0, 4]}}).encode()
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(4))
    with pytest.raises(SafetensorsError, match="is not one import reads") as refused:
        read_header(path, "model.safetensors")
    assert len(str(refused.value)) < 300  # a thousand-item dtype is not echoed whole
