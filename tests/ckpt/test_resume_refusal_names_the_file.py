"""A resume whose DCP holds a non-tensor entry torch's weights-only load refuses (a damaged
pickled dataloader or trainer state blob) says one line naming the data file and the key,
as validate and export-hf name both for the same damage. Was: the key alone
(`extra.dataloader: damaged pickle ...`), leaving the user to search every .distcp for it."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from mfsdp_ckpt.checkpoint_failures import load_failure
from mfsdp_ckpt.storage.reader import CheckpointReader
from mfsdp_ckpt.storage.safe_dcp import SafeFileSystemReader, SafeLoadPlanner
from tests.support.megatron_checkpoints import save_dcp

KEY = "extra.dataloader"
EXT1 = 130  # a pickle opcode torch's weights-only unpickler does not know


def _damaged(tmp_path: Path) -> tuple[Path, Path]:
    """A DCP save (CRCs off) whose `extra.dataloader` pickle is damaged past its protocol
    opcode (its int now an extension code);
    (the checkpoint, its data file)."""
    state = {"model": {"w": torch.randn(4)}, "extra": {"dataloader": 40, "step": 3}}
    torch.serialization.set_crc32_options(False)
    try:
        ckpt = save_dcp(state, tmp_path / "ck")
    finally:
        torch.serialization.set_crc32_options(True)
    (data,) = ckpt.glob("*.distcp")
    entry = CheckpointReader(ckpt).objects[KEY]
    raw = bytearray(data.read_bytes())
    name_length, extra = struct.unpack_from("<2H", raw, entry.file_offset + 26)
    start = entry.file_offset + 30 + name_length + extra  # the blob's data.pkl
    assert raw[start : start + 4] == b"\x80\x02K("  # PROTO 2, BININT1 40
    raw[start + 2] = EXT1
    data.write_bytes(bytes(raw))
    return ckpt, data


def test_a_resume_names_the_file_and_key_of_a_refused_entry(tmp_path):
    ckpt, data = _damaged(tmp_path)
    state = {"model": {"w": torch.zeros(4)}, "extra": {"dataloader": 0, "step": 0}}
    with pytest.raises(CheckpointException) as refused:
        dcp.load(
            state,
            storage_reader=SafeFileSystemReader(str(ckpt)),
            planner=SafeLoadPlanner(allow_partial_load=True),
            no_dist=True,
        )
    said = str(load_failure(refused.value, ckpt, {}))  # the line a resume prints
    assert f"{data} [{KEY}]: damaged pickle (Unsupported operand 130)" in said, said
    assert "\n" not in said


def test_the_reader_names_the_same_file_and_key(tmp_path):
    """What export-hf and validate read the entry with: the same file, the same key."""
    ckpt, data = _damaged(tmp_path)
    with pytest.raises(Exception) as refused:
        CheckpointReader(ckpt).read_object(KEY)
    assert f"{data} [{KEY}]: damaged pickle (Unsupported operand 130)" in str(refused.value)
