"""A plain export-hf (no --verify) checks the CRC torch.save wrote for every tensor record
it reads, the records torch decodes too.

A record read raw (one contiguous storage, as DCP writes) was checked as its bytes landed,
but one torch must decode (a non-contiguous tensor, a storage larger than the chunk,
another writer's pickle) went through torch.load, which checks no CRC: a flipped bit there
was exported, exit 0. Its bytes are now checked as torch reads them, in the same read.
"""

from __future__ import annotations

import re
import shutil
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from mfsdp_ckpt.check.tensor_crc import CrcCheckedReader
from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.storage.byte_store import LocalByteStore
from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.ckpt.test_blob_payload_bounds import _data_record
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import save_dcp

FAILS = "fails its CRC (bytes changed)"
DECODED = "model.layers.0.mlp.down_proj.weight"  # stored transposed: torch decodes it
KEY = f"model.{DECODED}"  # its key in the DCP


@pytest.fixture(scope="module")
def healthy(tmp_path_factory) -> tuple[Path, dict[str, torch.Tensor]]:
    """A bare DCP of a tiny Qwen2 (no manifest, as verl saves it), its config beside it,
    with DECODED stored as a non-contiguous view (its values unchanged)."""
    root = tmp_path_factory.mktemp("decoded_crc")
    model = tiny_causal_lm("qwen2")
    model.config.save_pretrained(root / "huggingface")
    weights = {name: value.detach().clone() for name, value in model.state_dict().items()}
    weights[DECODED] = weights[DECODED].t().contiguous().t()
    dcp = save_dcp({"model": weights}, root / "dist_ckpt")
    reader = CheckpointReader(dcp)
    entry = reader.tensors[KEY]
    assert reader.raw_payload(entry, entry.chunks[0]) is None  # decoded, not read raw
    return dcp, weights


def _flipped(healthy: Path, tmp_path: Path, member: str, at: int) -> Path:
    """A copy of `healthy` with one bit flipped `at` bytes into DECODED's record `member`
    (its data or its pickle); the file holding it."""
    shutil.copytree(healthy.parent / "huggingface", tmp_path / "huggingface")
    dcp = shutil.copytree(healthy, tmp_path / "dist_ckpt")
    (chunk,) = CheckpointReader(dcp).tensors[KEY].chunks
    assert chunk.file is not None
    path = dcp / chunk.file
    data = bytearray(path.read_bytes())
    blob = data[chunk.file_offset : chunk.file_offset + chunk.length]
    record = _data_record(blob) if member == "data" else _pickle_record(blob)
    name_len, extra_len = struct.unpack_from("<HH", blob, record.header_offset + 26)
    blob[record.header_offset + 30 + name_len + extra_len + at] ^= 0x01
    data[chunk.file_offset : chunk.file_offset + chunk.length] = blob
    path.write_bytes(bytes(data))
    return path


def _pickle_record(blob: bytearray):
    import io
    import zipfile

    return next(
        i
        for i in zipfile.ZipFile(io.BytesIO(bytes(blob))).infolist()
        if i.filename.endswith(".pkl")
    )


def test_export_refuses_a_flipped_bit_in_a_decoded_record(healthy, tmp_path):
    """Was: exit 0, the flipped value written to model.safetensors."""
    dcp, _ = healthy
    path = _flipped(dcp, tmp_path, "data", 100)
    code, stdout, err = run_cli("ckpt", "export-hf", path.parent, "--out", tmp_path / "hf")
    assert code == 1, stdout + err
    line = one_error_line(err)
    assert f"{path} [{KEY}]" in line and f"archive/data/0 {FAILS}" in line, line
    assert not (tmp_path / "hf").exists()


def test_export_of_the_unchanged_checkpoint_is_bit_exact(healthy, tmp_path):
    dcp, weights = healthy
    code, stdout, err = run_cli("ckpt", "export-hf", dcp, "--out", tmp_path / "hf")
    assert code == 0, stdout + err
    written = load_file(tmp_path / "hf" / "model.safetensors")
    assert torch.equal(written[DECODED], weights[DECODED])


class _CountingStore(LocalByteStore):
    """A local store counting the bytes read of each file."""

    def __init__(self, root: Path):
        super().__init__(root)
        self.read: dict[str, int] = {}

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        data = super().read_range(name, offset, length)
        self.read[name] = self.read.get(name, 0) + len(data)
        return data

    def read_into(self, name: str, offset: int, buffer: memoryview) -> None:
        super().read_into(name, offset, buffer)
        self.read[name] = self.read.get(name, 0) + len(memoryview(buffer).cast("B"))


@pytest.fixture(scope="module")
def large(tmp_path_factory) -> Path:
    """A DCP holding one 4 MiB tensor stored transposed (torch decodes it)."""
    value = torch.arange(1 << 20, dtype=torch.float32).reshape(1024, 1024)
    return save_dcp({"w": value.t()}, tmp_path_factory.mktemp("large_decoded") / "dcp")


@pytest.mark.parametrize("decoded_too", [False, True], ids=["export", "verify"])
def test_a_decoded_record_is_checked_in_the_one_read(decoded_too, large, tmp_path):
    """The blob is read once (plus its zip directory), its CRCs checked from those bytes;
    one flipped bit in them is refused, by the export's reads as by --verify's."""
    store = _CountingStore(large)
    reader = CrcCheckedReader.over(CheckpointReader(large, store), decoded_too=decoded_too)
    (chunk,) = reader.tensors["w"].chunks
    assert reader.raw_payload(reader.tensors["w"], chunk) is None
    store.read.clear()
    value = reader.read_chunk(reader.tensors["w"], chunk)
    assert torch.equal(value, torch.arange(1 << 20, dtype=torch.float32).reshape(1024, 1024).t())
    assert store.read[chunk.file] < chunk.length + (512 << 10), store.read
    dcp = shutil.copytree(large, tmp_path / "dcp")
    data = bytearray((dcp / chunk.file).read_bytes())
    blob = data[chunk.file_offset : chunk.file_offset + chunk.length]
    record = _data_record(blob)
    name_len, extra_len = struct.unpack_from("<HH", blob, record.header_offset + 26)
    data[chunk.file_offset + record.header_offset + 30 + name_len + extra_len + 3000] ^= 0x10
    (dcp / chunk.file).write_bytes(bytes(data))
    reader = CrcCheckedReader.over(CheckpointReader(dcp), decoded_too=decoded_too)
    with pytest.raises(
        CheckpointFormatError, match=re.escape(f"[w]: blob member archive/data/0 {FAILS}")
    ):
        reader.read_chunk(reader.tensors["w"], chunk)
