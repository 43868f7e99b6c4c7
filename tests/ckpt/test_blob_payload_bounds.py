"""A blob whose zip header places its payload outside the blob is refused, not read across.

The raw reads (validate --deep's windows, export's copy and --verify's reread) find a chunk's
bytes from its blob's zip local header. Its end was checked only against the whole data
file, so one 2-byte edit (a longer extra field), or a directory entry pointing at another
record's header, made them read the next blob of the same file as this tensor's values:
validate --deep passed the checkpoint or blamed "NaN values" on it, and export wrote the
weights shifted. Without a manifest (verl, Megatron-LM, torchtitan saves) no hash catches
it. Each such blob is now "unreadable blob" naming the tensor and its file, exit 1, as is one
whose local header disagrees with the central directory (a shorter extra field, other sizes)
or that is flagged encrypted or patched, which torch.load refuses.
"""

from __future__ import annotations

import io
import shutil
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from mfsdp_ckpt.check.blob_runs import SMALL_BLOB_BYTES
from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.storage.reader import CheckpointReader, Chunk
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import save_dcp

CENTRAL_ENTRY = b"PK\x01\x02"


@pytest.fixture(scope="module")
def healthy(tmp_path_factory) -> Path:
    """A bare DCP of a tiny Qwen2 (no manifest) beside its huggingface/config.json; every
    blob in one data file, its MLP blobs past the size the deep check reads whole."""
    root = tmp_path_factory.mktemp("payload")
    model = tiny_causal_lm("qwen2")
    model.config.save_pretrained(root / "huggingface")
    return save_dcp({"model": model.state_dict()}, root / "dist_ckpt")


def _copy(healthy: Path, tmp_path: Path) -> Path:
    shutil.copytree(healthy.parent / "huggingface", tmp_path / "huggingface")
    return shutil.copytree(healthy, tmp_path / "dist_ckpt")


def _target(dcp: Path) -> tuple[str, Chunk]:
    """An MLP weight (compared with no other tensor) read by windows, whose blob another
    blob follows in the same file."""
    reader = CheckpointReader(dcp)
    for name in sorted(n for n in reader.tensors if ".mlp." in n):
        (chunk,) = reader.tensors[name].chunks
        assert chunk.file is not None
        if chunk.length > SMALL_BLOB_BYTES and chunk.file_offset + chunk.length + (64 << 10) < (
            (dcp / chunk.file).stat().st_size
        ):
            return name, chunk
    raise AssertionError("no tensor blob followed by another")


def _records(blob: bytes | bytearray) -> dict[str, zipfile.ZipInfo]:
    return {i.filename: i for i in zipfile.ZipFile(io.BytesIO(bytes(blob))).infolist()}


def _data_record(blob: bytes | bytearray) -> zipfile.ZipInfo:
    return next(i for name, i in _records(blob).items() if name.endswith("/data/0"))


def _lengthen_extra_field(blob: bytearray, by: int) -> None:
    at = _data_record(blob).header_offset + 28
    (extra,) = struct.unpack_from("<H", blob, at)
    struct.pack_into("<H", blob, at, extra + by)


def longer_extra_field(blob: bytearray) -> None:
    """The data record's local header says its extra field is 8 KiB longer: the payload it
    implies ends 8 KiB into the next blob."""
    _lengthen_extra_field(blob, 8192)


def slightly_longer_extra_field(blob: bytearray) -> None:
    """64 bytes longer: the payload it implies ends inside the blob, in the next record."""
    _lengthen_extra_field(blob, 64)


def header_of_another_record(blob: bytearray) -> None:
    """The central directory points the data record at the last record's local header (a
    well-formed header of another name)."""
    last = max(i.header_offset for i in _records(blob).values())
    struct.pack_into("<I", blob, _central_entry(blob) + 42, last)


def compressed_local_header(blob: bytearray) -> None:
    """The data record's local header says DEFLATE (its bytes unchanged)."""
    struct.pack_into("<H", blob, _data_record(blob).header_offset + 8, zipfile.ZIP_DEFLATED)


def shorter_extra_field(blob: bytearray) -> None:
    """32 bytes shorter: the payload starts on the header's padding, and torch.load too reads
    it 8 floats early (its extra field is then no whole fields)."""
    _lengthen_extra_field(blob, -32)


def _central_entry(blob: bytearray) -> int:
    """Where the data record's central directory entry starts."""
    pos = 0
    while True:
        pos = blob.index(CENTRAL_ENTRY, pos)
        (name_len,) = struct.unpack_from("<H", blob, pos + 28)
        if bytes(blob[pos + 46 : pos + 46 + name_len]).endswith(b"/data/0"):
            return pos
        pos += len(CENTRAL_ENTRY)


def _flag_central(bit: int) -> Callable[[bytearray], None]:
    def edit(blob: bytearray) -> None:
        at = _central_entry(blob) + 8
        (flags,) = struct.unpack_from("<H", blob, at)
        struct.pack_into("<H", blob, at, flags | bit)

    return edit


def encrypted_in_central_directory(blob: bytearray) -> None:
    """Flag bit 0 in the central directory: torch.load and a resume refuse the record
    ("unsupported encryption")."""
    _flag_central(0x1)(blob)


def patched_data_in_central_directory(blob: bytearray) -> None:
    _flag_central(0x20)(blob)


def strongly_encrypted_in_local_header(blob: bytearray) -> None:
    at = _data_record(blob).header_offset + 6
    (flags,) = struct.unpack_from("<H", blob, at)
    struct.pack_into("<H", blob, at, flags | 0x40)


def local_size_disagreeing(blob: bytearray) -> None:
    """The local header's sizes say 4 bytes, the central directory the record's own."""
    at = _data_record(blob).header_offset
    struct.pack_into("<II", blob, at + 18, 4, 4)


EDITS = [
    longer_extra_field,
    slightly_longer_extra_field,
    shorter_extra_field,
    header_of_another_record,
    compressed_local_header,
    encrypted_in_central_directory,
    patched_data_in_central_directory,
    strongly_encrypted_in_local_header,
    local_size_disagreeing,
]


def _damaged(healthy: Path, tmp_path: Path, edit: Callable[[bytearray], None]) -> tuple[Path, str]:
    """A copy of `healthy` with `edit` applied to one tensor's blob in place (sizes kept)."""
    dcp = _copy(healthy, tmp_path)
    name, chunk = _target(dcp)
    assert chunk.file is not None
    path = dcp / chunk.file
    data = bytearray(path.read_bytes())
    blob = data[chunk.file_offset : chunk.file_offset + chunk.length]
    edit(blob)
    data[chunk.file_offset : chunk.file_offset + chunk.length] = blob
    path.write_bytes(bytes(data))
    return dcp, name


@pytest.mark.parametrize("edit", EDITS, ids=lambda e: e.__name__)
def test_validate_deep_refuses_the_blob_naming_tensor_and_file(edit, healthy, tmp_path):
    """Was: exit 0 ("valid") or "N NaN and 0 Inf values" from the next blob's bytes."""
    dcp, name = _damaged(healthy, tmp_path, edit)
    code, stdout, err = run_cli("ckpt", "validate", dcp, "--deep")
    assert code == 1, stdout + err
    line = one_error_line(stdout)
    assert f"[{name}]" in line and f"{dcp}/__0_0.distcp" in line, line
    assert "unreadable blob (record '" in line, line
    assert "NaN" not in line and "truncated" not in line, line


@pytest.mark.parametrize("edit", EDITS, ids=lambda e: e.__name__)
def test_export_refuses_the_blob(edit, healthy, tmp_path):
    """Was: exit 0, --verify too, with the tensor's values read from the next blob."""
    dcp, name = _damaged(healthy, tmp_path, edit)
    out = tmp_path / "hf"
    code, stdout, err = run_cli("ckpt", "export-hf", dcp, "--out", out, "--verify")
    line = one_error_line(err)
    assert code == 1, stdout + err
    assert f"[{name}]: unreadable blob" in line and f"{dcp}/__0_0.distcp" in line, line
    assert not out.exists()


@pytest.mark.parametrize("edit", EDITS, ids=lambda e: e.__name__)
def test_the_raw_offset_both_reads_take_is_refused(edit, healthy, tmp_path):
    """The one place both raw reads take their offset from refuses it (its callers then
    report the error rather than decode around it)."""
    dcp, name = _damaged(healthy, tmp_path, edit)
    reader = CheckpointReader(dcp)
    entry = reader.tensors[name]
    with pytest.raises(CheckpointFormatError, match=r"unreadable blob \(record '") as refused:
        reader.raw_payload_offset(entry, entry.chunks[0])
    assert f"[{name}]" in str(refused.value)


def test_a_healthy_checkpoint_still_validates_and_exports(healthy, tmp_path):
    dcp = _copy(healthy, tmp_path)
    name, chunk = _target(dcp)
    reader = CheckpointReader(dcp)
    offset = reader.raw_payload_offset(reader.tensors[name], chunk)
    assert offset is not None and chunk.file is not None
    stored = reader.read_tensor(name).numpy().tobytes()
    assert reader.store.read_range(chunk.file, offset, len(stored)) == stored
    code, stdout, err = run_cli("ckpt", "validate", dcp, "--deep")
    assert code == 0, stdout + err
    code, stdout, err = run_cli("ckpt", "export-hf", dcp, "--out", tmp_path / "hf", "--verify")
    assert code == 0, stdout + err
