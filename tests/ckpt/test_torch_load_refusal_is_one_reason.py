"""A blob torch.load(weights_only=True) refuses is said in one line naming the file and key,
with the unpickler's own reason: `damaged pickle (Unsupported operand 130)`, or `refusing
to load global os.system`. Was: torch's page around that reason, cut to 120 characters
("unreadable blob (UnpicklingError: Weights only load failed. In PyTorch 2.6, we changed
the def…"), advice to load the file unsafely where the reason should be, from every place
that loads a blob: a reader's non-tensor entry, a streamed tensor, and a resume's DCP load."""

from __future__ import annotations

import io
import os
import struct
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from mfsdp_ckpt.checkpoint_failures import load_failure
from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.storage.blob_decode import load_blob
from mfsdp_ckpt.storage.reader import CheckpointReader
from mfsdp_ckpt.storage.safe_dcp import SafeFileSystemReader, SafeLoadPlanner
from tests.support.megatron_checkpoints import save_dcp

EXT1 = 130  # a pickle opcode torch's weights-only unpickler does not know


def _pickle_start(raw: bytes | bytearray) -> int:
    """Where the first stored member's bytes (a torch.save's data.pkl) begin."""
    at = raw.find(b"PK\x03\x04")
    name_length, extra = struct.unpack_from("<2H", raw, at + 26)
    return at + 30 + name_length + extra


def _damaged_save(tmp_path: Path) -> Path:
    """A DCP save written with CRCs off, its `step` entry's pickle damaged past the
    protocol opcode (the first blob of the only data file: DCP writes objects first)."""
    torch.serialization.set_crc32_options(False)
    try:
        ckpt = save_dcp({"model": {"norm.weight": torch.randn(4)}, "step": 3}, tmp_path / "ck")
    finally:
        torch.serialization.set_crc32_options(True)
    (data,) = ckpt.glob("*.distcp")
    raw = bytearray(data.read_bytes())
    start = _pickle_start(raw)
    assert raw[start : start + 3] == b"\x80\x02K"  # PROTO 2, BININT1 3
    raw[start + 2] = EXT1
    data.write_bytes(bytes(raw))
    return ckpt


def _assert_one_reason(said: str, *wanted: str) -> None:
    assert all(w in said for w in wanted), said
    assert "Weights only" not in said and "weights_only" not in said, said
    assert "trust" not in said and "\n" not in said, said


def test_a_damaged_entry_names_its_file_key_and_the_unpicklers_reason(tmp_path):
    ckpt = _damaged_save(tmp_path)
    with pytest.raises(CheckpointFormatError) as refused:
        CheckpointReader(ckpt).read_object("step")
    _assert_one_reason(
        str(refused.value), "__0_0.distcp", "[step]", "damaged pickle (Unsupported operand 130)"
    )


def test_a_resume_load_says_the_same_reason(tmp_path):
    ckpt = _damaged_save(tmp_path)
    state = {"model": {"norm.weight": torch.zeros(4)}, "step": 0}
    with pytest.raises(CheckpointException) as refused:
        dcp.load(
            state,
            storage_reader=SafeFileSystemReader(str(ckpt)),
            planner=SafeLoadPlanner(allow_partial_load=True),
            no_dist=True,
        )
    said = str(load_failure(refused.value, ckpt, {}))  # the line a resume prints
    _assert_one_reason(
        said,
        f"{ckpt}: load failed:",
        "__0_0.distcp [step]: damaged pickle (Unsupported operand 130)",
    )


def test_a_refused_global_is_named_as_the_restricted_reader_names_it():
    out = io.BytesIO()
    torch.save({"call": os.system}, out)
    with pytest.raises(CheckpointFormatError) as refused:
        load_blob(out.getvalue(), (), "F [extra]")
    _assert_one_reason(str(refused.value), "F [extra]: refusing to load global")


def test_a_resume_names_the_tensor_whose_blob_torch_refuses(tmp_path):
    torch.serialization.set_crc32_options(False)
    try:
        ckpt = save_dcp({"model": {"norm.weight": torch.randn(4)}}, tmp_path / "ck")
    finally:
        torch.serialization.set_crc32_options(True)
    (data,) = ckpt.glob("*.distcp")
    raw = data.read_bytes()
    named = raw.index(
        b"ctorch._utils\n_rebuild_tensor_v2\n"
    )  # the same length: a global torch refuses
    raw = raw[:named] + b"ctorch._utilz" + raw[named + len(b"ctorch._utils") :]
    data.write_bytes(raw)
    with pytest.raises(CheckpointException) as refused:
        dcp.load(
            {"model": {"norm.weight": torch.zeros(4)}},
            storage_reader=SafeFileSystemReader(str(ckpt)),
            planner=SafeLoadPlanner(allow_partial_load=True),
            no_dist=True,
        )
    said = str(load_failure(refused.value, ckpt, {}))
    _assert_one_reason(
        said,
        f"{data} [model.norm.weight]: refusing to load global torch._utilz._rebuild_tensor_v2",
    )
