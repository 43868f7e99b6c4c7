"""What validate does per chunk stays bounded by the checkpoint, not by its tensors: the
pairwise overlap check of irregular tilings draws on one budget per checkpoint, and chunks
without a storage entry are listed up to MAX_LISTED_PROBLEMS, then counted.

Was: 2,000 keys naming one irregular list of 1,413 chunks each spent a second of the
per-tensor pair budget (validate > 120 s from a 99 KB file), and 3 tensors of 1,413 chunks
without storage entries printed 4,244 lines.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import torch
from torch.distributed.checkpoint.metadata import (
    ChunkStorageMetadata,
    Metadata,
    TensorProperties,
    TensorStorageMetadata,
)

from mfsdp_ckpt.check.validate import validate_checkpoint
from mfsdp_ckpt.storage.chunk_checks import MAX_LISTED_PROBLEMS

TOO_LARGE = "chunks form an irregular tiling too large to check"
UNWRITTEN = "has no storage entry (its bytes were never written)"


def _dist(tmp_path: Path, state: dict) -> Path:
    """A bare DCP dir whose `.metadata` lists `state` (no storage entries, no data files)."""
    dist = tmp_path / "dist_ckpt"
    dist.mkdir()
    (dist / ".metadata").write_bytes(pickle.dumps(Metadata(state)))
    return dist


def _tensor(shape: tuple[int, ...], spans: list[tuple[tuple, tuple]]) -> TensorStorageMetadata:
    chunks = [ChunkStorageMetadata(torch.Size(o), torch.Size(s)) for o, s in spans]
    return TensorStorageMetadata(TensorProperties(dtype=torch.float32), torch.Size(shape), chunks)


def _pinwheel_and_columns(columns: int) -> TensorStorageMetadata:
    """An exact tiling of a (3, 3 + columns) tensor that no dim splits: a pinwheel of five
    chunks on the first 3x3 (no cut through it), then one 3x1 column chunk per column
    (spanning every row), so every pair is compared."""
    pinwheel = [
        ((0, 0), (1, 2)),
        ((0, 2), (2, 1)),
        ((2, 1), (1, 2)),
        ((1, 0), (2, 1)),
        ((1, 1), (1, 1)),
    ]
    slabs = [((0, 3 + j), (3, 1)) for j in range(columns)]
    return _tensor((3, 3 + columns), pinwheel + slabs)


def test_irregular_tilings_share_one_pair_budget(tmp_path):
    """Three keys naming one such tiling of 1,414 chunks (~999,000 pairs, within the budget
    once): the first is checked and found exact, the others are too large to check, where
    each used to spend a budget of its own."""
    count = 1414  # pairs: within chunk_checks.PairBudget.PAIRS (1M) once, not twice
    shared = _pinwheel_and_columns(count - 5)
    dist = _dist(tmp_path, {f"model.x{i}": shared for i in range(3)})
    report = validate_checkpoint(dist)
    too_large = sorted(f.where for f in report.findings if TOO_LARGE in f.message)
    assert too_large == [f"{dist / '.metadata'} [model.x{i}]" for i in (1, 2)], too_large
    assert not any("overlap" in f.message or "cover" in f.message for f in report.findings), (
        report.findings
    )


def test_chunks_without_storage_entries_are_listed_then_counted(tmp_path):
    """3 tensors of 100 chunks, none with a storage entry: 20 lines and one count."""
    state = {f"model.x{t}": _tensor((100,), [((i,), (1,)) for i in range(100)]) for t in range(3)}
    report = validate_checkpoint(_dist(tmp_path, state))
    listed = [f for f in report.findings if UNWRITTEN in f.message]
    assert len(listed) == MAX_LISTED_PROBLEMS
    counted = [f for f in report.findings if "more chunks without a storage entry" in f.message]
    assert [f.message for f in counted] == [
        f"(+{300 - MAX_LISTED_PROBLEMS} more chunks without a storage entry)"
    ]
