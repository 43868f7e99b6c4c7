"""A .metadata is read up to its pickle's STOP, as torch's reader reads it.

A 40 KB metadata pickle followed by 960 MB of zeros was read whole (1 GB RSS), raised the
pickle's memory budget to 64 bytes per byte of the whole file, and passed validate with no
word of the junk. Now the bytes after the STOP buy no budget, a file read from disk is not
read past the STOP, and validate says how many bytes follow the pickle.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp

from mfsdp_ckpt.format import dcp_metadata
from mfsdp_ckpt.format.dcp_metadata import allowed_classes, record_types
from mfsdp_ckpt.format.restricted_pickle import RestrictedUnpickler, memory_budget
from tests.support.interop_layouts import run_cli

PADDING = 300 << 20  # sparse: costs no disk


def _checkpoint(tmp_path: Path) -> Path:
    out = tmp_path / "ckpt"
    dcp.save(
        {"model.embed_tokens.weight": torch.randn(8, 4), "extra.step": 3},
        checkpoint_id=str(out),
        no_dist=True,
    )
    return out


def _pad(path: Path, extra: int) -> int:
    """Grow `path` by `extra` zero bytes (a hole); its pickle's own size."""
    size = path.stat().st_size
    with path.open("r+b") as file:
        file.truncate(size + extra)
    return size


def test_validate_says_how_many_bytes_follow_the_pickle(tmp_path):
    ckpt = _checkpoint(tmp_path)
    _pad(ckpt / ".metadata", 1 << 20)
    code, stdout, err = run_cli("ckpt", "validate", ckpt)
    assert code == 0, stdout + err
    lines = [line for line in (stdout + err).splitlines() if "after the metadata pickle" in line]
    assert len(lines) == 1 and lines[0].startswith("warning:"), stdout + err
    assert ".metadata: 1,048,576 bytes after the metadata pickle" in lines[0], lines[0]


def test_bytes_after_the_pickle_raise_no_budget(tmp_path):
    """The budget a pickle is held to is its own size's: 20 MiB of zeros after a small
    pickle used to lift it from 1 GiB to 1.25 GiB."""
    ckpt = _checkpoint(tmp_path)
    pickle_bytes = (ckpt / ".metadata").read_bytes()
    data = pickle_bytes + bytes(20 << 20)
    allowed = allowed_classes("plain")
    reader = RestrictedUnpickler(data, allowed, record_types(allowed))
    reader.load()
    assert reader.consumed == len(pickle_bytes)
    assert reader.budget == memory_budget(len(pickle_bytes)) < memory_budget(len(data))


def _peak(read) -> tuple[object, int]:
    tracemalloc.start()
    try:
        value = read()
        return value, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_metadata_file_is_not_read_past_its_pickle(tmp_path):
    """Both readers of a file, the plain one (validate, inspect, export once the reader
    hands it the file) and DCP's own classes (mfsdp's dcp.load), hold a few MB of a file of
    300 MB whose pickle is a few KB, and count what follows it."""
    ckpt = _checkpoint(tmp_path)
    path = ckpt / ".metadata"
    own = _pad(path, PADDING)
    size = path.stat().st_size

    def plain():
        with path.open("rb", buffering=dcp_metadata.READ_BUFFER_BYTES) as file:
            return dcp_metadata.load_plain_metadata_file(file, size, str(path))

    (metadata, after), peak = _peak(plain)
    assert after == PADDING and size == own + PADDING
    assert "model.embed_tokens.weight" in metadata.state_dict_metadata
    assert peak < 16 << 20, peak
    dcp_own, peak = _peak(lambda: dcp_metadata.load_metadata(path))
    assert "model.embed_tokens.weight" in dcp_own.state_dict_metadata
    assert peak < 16 << 20, peak


def test_a_declared_length_past_the_file_is_not_allocated(tmp_path):
    """BINUNICODE8 may declare 2**40 bytes; read from a file, the read is cut to what the
    file holds (a file's read allocates what it is asked for first), so it fails as a
    truncated pickle at once."""
    path = tmp_path / ".metadata"
    path.write_bytes(b"\x80\x04\x8d" + (1 << 40).to_bytes(8, "little") + b"abc")
    try:
        with path.open("rb") as file:
            dcp_metadata.load_plain_metadata_file(file, path.stat().st_size, "x")
    except dcp_metadata.UnsafeMetadataError as err:
        assert "x: unreadable DCP metadata" in str(err), err
    else:
        raise AssertionError("a truncated pickle was read")
