"""Hostile metadata must not make the readers allocate: each case runs in a fresh process
and its peak RSS growth (resource.getrusage) must stay under a small bound while the
reader refuses with a documented error.

Cases: a 9-byte .metadata whose PUT opcode names memo slot 2**28 (the C unpickler
would allocate and zero 2 GiB); a tensor claiming 10 TB; a tensor claiming 512 GB in two
chunks that point into a file of a few bytes (the reader must not allocate the output
before checking the files can hold it); offsets that overflow int64. The consumer-level
hostile faults (code in .metadata or a blob, path traversal, symlinks out) are in the
fault matrix, tests/reliability/faults.py.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex

from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.format.dcp_metadata import load_metadata
from tests.support.paths import REPO

MAX_GROWTH_MIB = 200  # what torch itself may touch on the way; a refused bomb is GiBs

PROBE = r"""
import json, resource, sys
sys.path.insert(0, sys.argv[1])
from mfsdp_ckpt.storage.reader import CheckpointReader, CheckpointFormatError
from mfsdp_ckpt.format.dcp_metadata import UnsafeMetadataError
from tests.support.metadata_reads import load_metadata_bytes
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.check.validate import validate_checkpoint

def unpickle(target):
    load_metadata_bytes(open(target, "rb").read())

def read_all(target):
    reader = CheckpointReader(target)
    for name in reader.tensors:
        reader.read_tensor(name)

def validate_deep(target):
    report = validate_checkpoint(target, deep=True)
    return "; ".join(str(f) for f in report.findings if f.severity == "error")

before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
outcomes = {}
for action in sys.argv[3].split(","):
    try:
        outcomes[action] = globals()[action](sys.argv[2]) or "accepted"
    except (UnsafeMetadataError, CheckpointFormatError, CheckpointFileError) as err:
        outcomes[action] = f"{type(err).__name__}: {err}"
grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
print(json.dumps({"outcomes": outcomes, "grew_mib": grew}))
"""


def probe(target: Path, *actions: str) -> dict:
    """Run `actions` on `target` in a fresh process:
    {"outcomes": {action: text}, "grew_mib": peak RSS growth}."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(REPO), str(target), ",".join(actions)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def small_ckpt(tmp_path) -> Path:
    """A one-tensor checkpoint (fp32, 4 x 4) whose .metadata the cases rewrite."""
    run = tmp_path / "run"
    Checkpointer(run, strategy="none").save(
        1, {"model": {"w": torch.randn(4, 4)}}, contents=("model",)
    )
    return layout.step_dir(run, 1) / layout.DIST_CKPT_DIR


def rewrite(dist_ckpt: Path, edit) -> None:
    path = dist_ckpt / layout.DCP_METADATA_FILE
    metadata = load_metadata(path)
    edit(metadata)
    path.write_bytes(pickle.dumps(metadata))


def test_memo_index_bomb_is_refused_without_allocating(tmp_path):
    bomb = tmp_path / ".metadata"
    bomb.write_bytes(b"\x80\x04N" + b"r" + struct.pack("<I", 0x10000000) + b".")
    result = probe(bomb, "unpickle")
    assert "memo index 268435456 skips past the 0 entries" in result["outcomes"]["unpickle"]
    assert result["grew_mib"] < MAX_GROWTH_MIB, result


def test_ten_terabyte_tensor_is_refused_at_parse(small_ckpt):
    def edit(metadata):
        item = metadata.state_dict_metadata["model.w"]
        item.size = torch.Size([10 * 2**40 // 4])
        item.chunks = [ChunkStorageMetadata(torch.Size([0]), torch.Size([10 * 2**40 // 4]))]

    rewrite(small_ckpt, edit)
    result = probe(small_ckpt, "read_all", "validate_deep")
    assert all("absurdly large" in text for text in result["outcomes"].values()), result
    assert result["grew_mib"] < MAX_GROWTH_MIB, result


def test_half_terabyte_tensor_in_a_tiny_file_is_refused_before_allocating(small_ckpt):
    """Two chunks tile a 512 GB tensor; their storage is a few bytes of a small file."""
    half = 2**36  # fp32 elements: 256 GB per chunk

    def edit(metadata):
        item = metadata.state_dict_metadata["model.w"]
        old_index = next(iter(metadata.storage_data))
        info = metadata.storage_data.pop(old_index)
        item.size = torch.Size([2 * half])
        item.chunks = [
            ChunkStorageMetadata(torch.Size([0]), torch.Size([half])),
            ChunkStorageMetadata(torch.Size([half]), torch.Size([half])),
        ]
        for offset, length in ((0, info.length), (half, 0)):  # one blob names its bytes
            metadata.storage_data[MetadataIndex("model.w", torch.Size([offset]))] = (
                dataclasses.replace(info, length=length)
            )

    rewrite(small_ckpt, edit)
    result = probe(small_ckpt, "read_all", "validate_deep")
    assert all(
        "cannot hold 68719476736 torch.float32 elements" in t for t in result["outcomes"].values()
    ), result
    assert result["grew_mib"] < MAX_GROWTH_MIB, result


def test_overflowing_offsets_are_refused(small_ckpt):
    def edit(metadata):
        item = metadata.state_dict_metadata["model.w"]
        item.chunks = [ChunkStorageMetadata(torch.Size([2**63 - 1, 0]), torch.Size([4, 4]))]

    rewrite(small_ckpt, edit)
    result = probe(small_ckpt, "read_all", "validate_deep")
    assert all("runs past dim 0" in text for text in result["outcomes"].values()), result
    assert result["grew_mib"] < MAX_GROWTH_MIB, result
