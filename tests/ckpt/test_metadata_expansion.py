"""A small `.metadata` that names one object many times through the pickle memo: each
reader walks every reference anew, so what reading it costs must be bounded by the file's
bytes, not by what the references expand to.

Was: 300 keys naming one memoized list of 10,000 chunks (a 402 KB file) kept validate
busy past two minutes at 1.6 GB, printing 915,403 lines; a 1.4 KB planner_data of nested
memoized lists never finished. Each is refused as the file is read, in one line naming it.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import (
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    TensorProperties,
    TensorStorageMetadata,
)

from cli.main import app
from mfsdp_ckpt.check.validate import validate_checkpoint
from mfsdp_ckpt.errors import UnsafeMetadataError
from mfsdp_ckpt.format.dcp_metadata import MIN_CHUNKS, MIN_ITEMS, load_plain_metadata_bytes


def _dist(tmp_path: Path, metadata: Metadata) -> Path:
    """A bare DCP dir holding only `metadata` (its data files are never reached)."""
    dist = tmp_path / "dist_ckpt"
    dist.mkdir()
    (dist / ".metadata").write_bytes(pickle.dumps(metadata))
    return dist


def _slabs(count: int) -> TensorStorageMetadata:
    """A float32 vector of `count` one-element chunks: a valid tiling."""
    chunks = [ChunkStorageMetadata(torch.Size([i]), torch.Size([1])) for i in range(count)]
    return TensorStorageMetadata(TensorProperties(dtype=torch.float32), torch.Size([count]), chunks)


def test_one_chunk_list_named_by_many_keys_is_refused_in_one_line(tmp_path):
    """100 keys x one memoized list of 1,000 chunks: 100,000 chunk records from a ~30 KB
    file, past the floor of MIN_CHUNKS (and a chunk per 16 bytes of file). A real save
    pickles each chunk it lists with its storage entry, ~120-150 bytes a chunk: 180,000 of
    them are read (tests/reliability/test_reliability_limits.py)."""
    shared = _slabs(1000)
    dist = _dist(tmp_path, Metadata({f"model.x{i}": shared for i in range(100)}))
    assert (dist / ".metadata").stat().st_size < 40_000 and MIN_CHUNKS < 100 * 1000
    report = validate_checkpoint(dist)
    errors = [str(f) for f in report.findings if f.severity == "error"]
    assert len(errors) == 1 and f"{dist / '.metadata'}: its keys list more than" in errors[0]
    assert "one chunk list named by several keys counts for each" in errors[0]
    for command in ("validate", "inspect"):
        result = CliRunner().invoke(app, ["ckpt", command, str(dist)])
        assert result.exit_code == 1, result.output
        assert "its keys list more than 65,536 chunks" in result.output
        assert "Traceback" not in result.output and len(result.output.splitlines()) <= 2


def _nested_planner_data() -> Metadata:
    """planner_data of one memoized list named 100 x 100 times: 2M values from ~1 KB."""
    leaf = list(range(200))
    return Metadata({}, planner_data={"model.x": [[leaf] * 100] * 100})


def _shared_transforms() -> Metadata:
    """1,200 storage entries naming one memoized list of 1,000 transform names: each chunk
    would copy all of them."""
    names = ["stream.zstd"] * 1000
    entry = _slabs(1200)
    storage = {
        MetadataIndex("model.x", c.offsets): _StorageInfo("__0_0.distcp", i * 4, 4, names)
        for i, c in enumerate(entry.chunks)
    }
    return Metadata({"model.x": entry}, storage_data=storage)


@pytest.mark.parametrize(
    "build, fragment",
    [
        (_nested_planner_data, "planner_data: more than"),
        (_shared_transforms, "transforms: more than"),
    ],
    ids=["planner_data", "transforms"],
)
def test_plain_data_named_many_times_is_refused(build, fragment):
    data = pickle.dumps(build())
    assert len(data) < 200_000 < MIN_ITEMS
    with pytest.raises(
        UnsafeMetadataError, match=f"<bytes>: .*{fragment} {MIN_ITEMS:,} values named"
    ):
        load_plain_metadata_bytes(data)
