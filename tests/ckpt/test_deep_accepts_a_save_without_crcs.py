"""A DCP checkpoint saved with `torch.serialization.set_crc32_options(False)` (torch.save
then writes 0 as every record's CRC; torch.load checks none) is valid under validate --deep,
while a CRC torch did write and the bytes no longer match is still refused. Was: every
tensor small enough to be decoded (< 64 KiB) was refused, "Bad CRC-32", exit 1: the
verdict hung on the tensor's size (`zip_crc`)."""

from __future__ import annotations

import io
import struct
import zipfile
from collections.abc import Iterator

import pytest
import torch

from mfsdp_ckpt.check.report import ERROR
from mfsdp_ckpt.check.validate import validate_checkpoint
from mfsdp_ckpt.format.zip_crc import first_bad_member, read_member
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import save_dcp


@pytest.fixture
def crc_off() -> Iterator[None]:
    """torch.save writes no CRC while the test runs."""
    torch.serialization.set_crc32_options(False)
    try:
        yield
    finally:
        torch.serialization.set_crc32_options(True)


def _state() -> dict:
    torch.manual_seed(0)
    # a small tensor (decoded by --deep) and one past 64 KiB (read raw)
    return {
        "model": {"norm.weight": torch.randn(30), "up.weight": torch.randn(200, 200)},
        "step": 3,  # non-tensor blobs, checked as archives (`object_archives`)
        "extra_state": io.BytesIO(b"extra"),
    }


def _flip_in_member(raw: bytearray, suffix: bytes) -> None:
    """Change the first byte of the first stored member named `*suffix` (found by its local
    header: signature, then the name's and the extra field's lengths at 26 and 28)."""
    at = raw.find(b"PK\x03\x04")
    while at >= 0:
        name_length, extra = struct.unpack_from("<2H", raw, at + 26)
        if raw[at + 30 : at + 30 + name_length].endswith(suffix):
            raw[at + 30 + name_length + extra] ^= 0xFF
            return
        at = raw.find(b"PK\x03\x04", at + 4)
    raise AssertionError(f"no member named *{suffix!r}")


def test_a_save_without_crcs_is_valid_deep(tmp_path, crc_off):
    ckpt = save_dcp(_state(), tmp_path / "ck")
    code, stdout, stderr = run_cli("ckpt", "validate", "--deep", ckpt)
    assert code == 0, stdout + stderr
    assert "valid:" in stdout + stderr and "CRC" not in stdout + stderr


def test_a_written_crc_that_fails_is_still_refused(tmp_path):
    ckpt = save_dcp({"model": {"norm.weight": torch.randn(30)}}, tmp_path / "ck")
    (data,) = ckpt.glob("*.distcp")
    raw = bytearray(data.read_bytes())
    _flip_in_member(raw, b"/data.pkl")
    data.write_bytes(bytes(raw))
    found = [f for f in validate_checkpoint(ckpt, deep=True).findings if f.severity == ERROR]
    assert any("blob member archive/data.pkl fails its CRC" in f.message for f in found), found


def _saved(crc: bool) -> bytearray:
    torch.serialization.set_crc32_options(crc)
    try:
        out = io.BytesIO()
        torch.save(torch.arange(16.0), out)
    finally:
        torch.serialization.set_crc32_options(True)
    return bytearray(out.getvalue())


def test_members_without_a_crc_read_unchecked():
    raw = _saved(crc=False)
    _flip_in_member(raw, b"/data/0")  # as torch.load would, unseen
    archive = zipfile.ZipFile(io.BytesIO(bytes(raw)))
    assert all(info.CRC == 0 for info in archive.infolist())
    assert first_bad_member(archive) is None
    (payload,) = [i for i in archive.infolist() if i.filename.endswith("/data/0")]
    assert len(read_member(archive, payload)) == 64


def test_members_with_a_written_crc_are_checked():
    raw = _saved(crc=True)
    _flip_in_member(raw, b"/data/0")
    archive = zipfile.ZipFile(io.BytesIO(bytes(raw)))
    (payload,) = [i for i in archive.infolist() if i.filename.endswith("/data/0")]
    assert first_bad_member(archive) == payload.filename
    with pytest.raises(zipfile.BadZipFile, match="Bad CRC-32"):
        read_member(archive, payload)
    assert first_bad_member(zipfile.ZipFile(io.BytesIO(bytes(_saved(crc=True))))) is None
