"""Reading `.metadata` into a reader's tables: no cycle collection while it builds them, and
the tables' checks of shapes and offsets unchanged by their fast path."""

from __future__ import annotations

import enum
import gc
import pickle
import warnings
import weakref
from pathlib import Path

import pytest

from mfsdp_ckpt.errors import CheckpointFormatError, UnsafeMetadataError
from mfsdp_ckpt.format.restricted_pickle import RestrictedUnpickler
from mfsdp_ckpt.storage.held_collector import collector_held
from mfsdp_ckpt.storage.reader import CheckpointReader, _int_tuple


class _Rank(enum.IntEnum):
    TWO = 2


def _many_entries(out: Path) -> Path:
    """A DCP dir of 400 tensors and 400 non-tensor entries: thousands of objects parsed."""
    import torch
    import torch.distributed.checkpoint as dcp

    state = {f"w{i}": torch.zeros(2, 2) for i in range(400)}
    state |= {f"meta{i}": {"lr": 1e-5, "step": i} for i in range(400)}
    with warnings.catch_warnings():  # DCP warns that it saves without a process group
        warnings.simplefilter("ignore")
        dcp.save(state, checkpoint_id=str(out), no_dist=True)
    return out


def test_reader_parses_with_no_cycle_collection(tmp_path: Path) -> None:
    ckpt = _many_entries(tmp_path / "dist_ckpt")
    passes: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            passes.append(info["generation"])

    gc.collect()
    gc.callbacks.append(count)
    try:
        reader = CheckpointReader(ckpt)
    finally:
        gc.callbacks.remove(count)
    assert len(passes) <= 1, passes  # the one pass due once the block ends
    assert gc.isenabled()
    assert len(reader.tensors) == 400
    assert sum(name.startswith("meta") for name in reader.objects) == 800


def test_unpickler_freed_as_its_caller_lets_go() -> None:
    """With the collector held off, an unpickler left in a cycle would keep its memo (a
    reference to every object the pickle built) until a later collection."""
    data = pickle.dumps({f"k{i}": (i, [i]) for i in range(100)}, protocol=2)
    with collector_held():
        unpickler = RestrictedUnpickler(data, {}, ())
        value = unpickler.load()
        freed = weakref.ref(unpickler)
        del unpickler
        assert freed() is None
    assert value["k7"] == (7, [7])


def test_collector_held_restores_what_it_found() -> None:
    assert gc.isenabled()
    with collector_held():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_held():
            assert not gc.isenabled()
        assert not gc.isenabled()  # a caller that turned it off keeps it off
    finally:
        gc.enable()


def test_collector_back_on_after_a_failed_read(tmp_path: Path) -> None:
    ckpt = _many_entries(tmp_path / "dist_ckpt")
    data = (ckpt / ".metadata").read_bytes()
    (ckpt / ".metadata").write_bytes(data[: len(data) // 2])
    with pytest.raises(UnsafeMetadataError, match=r"\.metadata: unreadable"):
        CheckpointReader(ckpt)
    assert gc.isenabled()


@pytest.mark.parametrize(
    "value",
    [(True,), (1, False), (-1,), (0, 2**63), (1.0,), ("1",), tuple(range(65))],
    ids=["bool", "bool-after-int", "negative", "over-int64", "float", "str", "rank-65"],
)
def test_shape_of_anything_but_indices_refused(value: tuple) -> None:
    with pytest.raises(CheckpointFormatError, match="w: shape: expected"):
        _int_tuple(value, "w: shape")


@pytest.mark.parametrize(
    "value", [(), (0,), (3, 2**63 - 1), [4, 5], (_Rank.TWO, 3), tuple(range(64))]
)
def test_shape_of_indices_kept(value: tuple | list) -> None:
    assert _int_tuple(value, "w: shape") == tuple(value)
