"""A Megatron-FSDP checkpoint of many small parameters (bench/metadata_scan.py's, tiny): the
faster reads give the same results as before.

- `.metadata` read by the restricted unpickler (its memo opcodes run inline) equals what
  pickle itself builds from the same bytes;
- validate --deep reads every tensor through runs of neighbours (`reading_ahead`): the
  same tensors, bit for bit, as reads one at a time, each byte of the data file read once
  and the file opened once per run, not per tensor;
- validate --deep reports the same with runs as with every blob read on its own.
"""

from __future__ import annotations

import itertools
import pickle
from pathlib import Path

import pytest
import torch

from bench.metadata_scan import build
from mfsdp_ckpt.check.read_ahead import ReadAhead, reading_ahead
from mfsdp_ckpt.check.validate import validate_checkpoint
from mfsdp_ckpt.errors import UnsafeMetadataError
from mfsdp_ckpt.format.dcp_metadata import load_metadata
from mfsdp_ckpt.storage.byte_store import CheckpointFileError, LocalByteStore
from mfsdp_ckpt.storage.reader import CheckpointReader

PARAMS = 24


class CountingStore(LocalByteStore):
    """A LocalByteStore that records every range it reads."""

    def __init__(self, root: Path):
        super().__init__(root)
        self.reads: list[tuple[str, int, int]] = []

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        self.reads.append((name, offset, length))
        return super().read_range(name, offset, length)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(PARAMS, tmp_path_factory.mktemp("many"))


def test_metadata_equals_what_pickle_builds(ckpt: Path) -> None:
    data = (ckpt / ".metadata").read_bytes()
    assert load_metadata(ckpt / ".metadata") == pickle.loads(data)


def test_memo_index_past_the_memo_is_refused(tmp_path: Path) -> None:
    for get in (b"h\x05", b"j\x05\x00\x00\x00"):  # BINGET 5, LONG_BINGET 5 of an empty memo
        path = tmp_path / ".metadata"
        path.write_bytes(b"\x80\x04" + get + b".")
        with pytest.raises(UnsafeMetadataError, match="Memo value not found at index 5"):
            load_metadata(path)


def test_declared_length_past_the_file_reads_only_the_file(tmp_path: Path) -> None:
    path = tmp_path / ".metadata"  # BINUNICODE8 claiming 2**40 bytes, then 3
    path.write_bytes(b"\x80\x04\x8d" + (1 << 40).to_bytes(8, "little") + b"abc")
    with pytest.raises(UnsafeMetadataError, match="unreadable DCP metadata"):
        load_metadata(path)


def test_tensors_read_ahead_are_the_same_each_byte_once(ckpt: Path) -> None:
    plain = CheckpointReader(ckpt)
    want = {name: plain.read_tensor(name) for name in plain.tensors}
    store = CountingStore(ckpt)
    reader = CheckpointReader(ckpt, store)
    store.reads.clear()  # the .metadata's
    chunks = [(c.file, c.file_offset, c.length) for e in reader.tensors.values() for c in e.chunks]
    with reading_ahead(reader, [(f, o, n) for f, o, n in chunks if f]):
        got = {name: reader.read_tensor(name) for name in reader.tensors}
    assert reader.store is store  # given back as the block ends
    assert got.keys() == want.keys()
    assert all(torch.equal(got[n], want[n]) and got[n].dtype == want[n].dtype for n in want)
    read = sorted((offset, offset + length) for _name, offset, length in store.reads)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(read))  # no byte read twice
    blobs = sum(length for _f, _o, length in chunks)
    assert sum(end - start for start, end in read) == blobs  # and nothing but the blobs
    assert len(store.reads) < len(chunks) // 4  # a run at a time, not a read per tensor


def test_a_run_cut_short_still_reads_its_whole_blobs(ckpt: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut"
    cut.mkdir()
    for item in ckpt.iterdir():
        (cut / item.name).write_bytes(item.read_bytes())
    reader = CheckpointReader(cut)
    chunk = next(iter(reader.tensors.values())).chunks[0]
    assert chunk.file is not None
    data = cut / chunk.file
    data.write_bytes(data.read_bytes()[: chunk.file_offset + chunk.length + 10])
    blob = (chunk.file, chunk.file_offset, chunk.length)
    after = (chunk.file, chunk.file_offset + chunk.length, 64)  # past the end now
    ahead = ReadAhead(reader.store, [blob, after])  # one run, which the file no longer holds
    assert ahead.read_range(*blob) == reader.store.read_range(*blob)
    with pytest.raises(CheckpointFileError, match=r"needs bytes .* \(truncated\?\)"):
        ahead.read_range(*after)


def test_validate_deep_says_the_same_as_reads_one_at_a_time(
    ckpt: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ahead = validate_checkpoint(ckpt, deep=True).to_dict()
    # the same checks with every read its own: runs of one blob
    monkeypatch.setattr("mfsdp_ckpt.check.read_ahead.RUN_BYTES", 0)
    alone = validate_checkpoint(ckpt, deep=True).to_dict()
    assert ahead["valid"] is True
    assert ahead == alone
