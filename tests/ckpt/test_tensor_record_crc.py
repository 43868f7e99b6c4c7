"""A tensor record's bytes are checked against the CRC torch.save wrote for them.

validate --deep and export --verify read every tensor byte raw (or decode small blobs),
checking values for NaN/Inf only: on a checkpoint with no manifest (verl, Megatron-LM,
torchtitan) one flipped bit in a tensor passed both, exit 0, "valid" and "verified", while
the same flip in a non-tensor blob was "fails its CRC". Both now check the record's CRC as
the bytes pass (the zip_crc rule: a CRC written as 0 is none, read unchecked).
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest

from mfsdp_ckpt.check.blob_runs import SMALL_BLOB_BYTES
from mfsdp_ckpt.storage.reader import CheckpointReader, Chunk
from tests.ckpt.test_blob_payload_bounds import _central_entry, _data_record
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import save_dcp

FAILS = "blob member archive/data/0 fails its CRC (bytes changed)"


@pytest.fixture(scope="module")
def healthy(tmp_path_factory) -> Path:
    """A bare DCP of a tiny Qwen2 (no manifest, as verl saves it), its config beside it."""
    root = tmp_path_factory.mktemp("crc")
    model = tiny_causal_lm("qwen2")
    model.config.save_pretrained(root / "huggingface")
    return save_dcp({"model": model.state_dict()}, root / "dist_ckpt")


def _pick(dcp: Path, large: bool) -> tuple[str, Chunk]:
    """A tensor whose blob the deep check reads by windows (`large`) or whole."""
    reader = CheckpointReader(dcp)
    for name in sorted(reader.tensors):
        (chunk,) = reader.tensors[name].chunks
        if (chunk.length > SMALL_BLOB_BYTES) == large and (".mlp." in name or "norm" in name):
            return name, chunk
    raise AssertionError("no such tensor")


def _flipped(healthy: Path, tmp_path: Path, large: bool, zero_crc: bool = False) -> tuple:
    """A copy of `healthy` with one bit of one tensor's payload flipped (and its CRC
    written as 0 in the central directory, where `zero_crc`: none written)."""
    shutil.copytree(healthy.parent / "huggingface", tmp_path / "huggingface")
    dcp = shutil.copytree(healthy, tmp_path / "dist_ckpt")
    name, chunk = _pick(dcp, large)
    assert chunk.file is not None
    path = dcp / chunk.file
    data = bytearray(path.read_bytes())
    blob = data[chunk.file_offset : chunk.file_offset + chunk.length]
    record = _data_record(blob)
    at = record.header_offset
    name_len, extra_len = struct.unpack_from("<HH", blob, at + 26)
    blob[at + 30 + name_len + extra_len + 100] ^= 0x01
    if zero_crc:
        struct.pack_into("<I", blob, _central_entry(blob) + 16, 0)
    data[chunk.file_offset : chunk.file_offset + chunk.length] = blob
    path.write_bytes(bytes(data))
    return dcp, name


@pytest.mark.parametrize("large", [False, True], ids=["whole", "windowed"])
def test_validate_deep_refuses_a_flipped_bit(large, healthy, tmp_path):
    """Was: exit 0, "valid: dist_ckpt (... deep; no manifest ...)"."""
    dcp, name = _flipped(healthy, tmp_path, large)
    code, stdout, err = run_cli("ckpt", "validate", dcp, "--deep")
    assert code == 1, stdout + err
    line = one_error_line(stdout)
    assert f"[{name}]" in line and FAILS in line and f"{dcp}/__0_0.distcp" in line, line


@pytest.mark.parametrize("large", [False, True], ids=["small", "large"])
def test_export_verify_refuses_a_flipped_bit(large, healthy, tmp_path):
    """Was: exit 0, "verified", the flipped value written."""
    dcp, name = _flipped(healthy, tmp_path, large)
    code, stdout, err = run_cli("ckpt", "export-hf", dcp, "--out", tmp_path / "hf", "--verify")
    assert code == 1, stdout + err
    line = one_error_line(err)
    assert f"[{name}]" in line and FAILS in line, line


def test_a_crc_written_as_zero_is_no_crc(healthy, tmp_path):
    """The zip_crc rule: a writer that writes no CRC (0) is not refused for it."""
    dcp, _ = _flipped(healthy, tmp_path, large=True, zero_crc=True)
    code, stdout, err = run_cli("ckpt", "validate", dcp, "--deep")
    assert code == 0, stdout + err
    code, stdout, err = run_cli("ckpt", "export-hf", dcp, "--out", tmp_path / "hf", "--verify")
    assert code == 0, stdout + err
