"""Uneven DTensor shards (Megatron-FSDP's layout) through `attach_uneven_chunk_metadata`:
the offsets each rank gets, a save that the offline reader stitches back, and a load into
a different uneven layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from mfsdp_ckpt.format import checkpoint_resolution, layout
from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.support.distributed import run_distributed

WORLD = 3
FULL = {
    "w": torch.arange(32, dtype=torch.float32).reshape(8, 4),
    "b": torch.arange(6, dtype=torch.float32) - 10,
    "exp_avg": torch.arange(32, dtype=torch.float32).reshape(8, 4) / 7,
}
SAVE_ROWS = {"w": (5, 0, 3), "b": (0, 6, 0), "exp_avg": (5, 0, 3)}
LOAD_ROWS = {"w": (1, 4, 3), "b": (2, 2, 2), "exp_avg": (0, 8, 0)}


def _pieces(rank: int, rows: dict[str, tuple[int, ...]], fill: bool) -> dict:
    """This rank's uneven pieces as DTensors; like Adam state, `exp_avg` is absent where empty."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    mesh = init_device_mesh("cpu", (WORLD,))
    state = {}
    for key, full in FULL.items():
        start, count = sum(rows[key][:rank]), rows[key][rank]
        if key == "exp_avg" and count == 0:
            continue
        local = (
            full[start : start + count].clone()
            if fill
            else torch.zeros_like(full[start : start + count])
        )
        state[key] = DTensor.from_local(
            local, mesh, [Shard(0)], shape=full.shape, stride=full.stride(), run_check=False
        )
    return state


def save_then_load(rank: int, world_size: int, run_dir: str, out_dir: str) -> None:
    from mfsdp_ckpt.checkpointer import Checkpointer, load_checkpoint
    from mfsdp_ckpt.storage.uneven_chunks import attach_uneven_chunk_metadata

    saved = _pieces(rank, SAVE_ROWS, fill=True)
    attach_uneven_chunk_metadata(saved)
    chunks = {
        key: [list(c.offsets) + list(c.sizes) for c in t.__create_chunk_list__()]
        for key, t in saved.items()
    }
    from megatron_fsdp.uneven_dtensor import gather_and_compute_chunk_metadata

    megatron = {}
    for key in ("w", "b"):  # held by every rank, as Megatron-FSDP's per-tensor collective needs
        meta = gather_and_compute_chunk_metadata(saved[key])
        megatron[key] = [list(meta.offsets) + list(meta.sizes)]
    checkpointer = Checkpointer(run_dir, strategy="megatron_fsdp")
    checkpointer.save(1, {"model": saved}, contents=("model",))
    checkpointer.close()

    loaded = _pieces(rank, LOAD_ROWS, fill=False)
    attach_uneven_chunk_metadata(loaded)
    load_checkpoint(
        checkpoint_resolution.resolve_checkpoint(run_dir), {"model": loaded}, contents=("model",)
    )
    expected = _pieces(rank, LOAD_ROWS, fill=True)
    same = {key: torch.equal(loaded[key].to_local(), expected[key].to_local()) for key in expected}
    Path(out_dir, f"rank{rank}.json").write_text(
        json.dumps({"chunks": chunks, "megatron": megatron, "loaded_equal": same})
    )


def refuses_partial(rank: int, world_size: int, out_dir: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial

    from mfsdp_ckpt.storage.uneven_chunks import attach_uneven_chunk_metadata

    mesh = init_device_mesh("cpu", (world_size,))
    tensor = DTensor.from_local(torch.ones(2), mesh, [Partial()])
    try:
        attach_uneven_chunk_metadata({"grad": tensor})
    except ValueError as err:
        Path(out_dir, f"rank{rank}.txt").write_text(str(err))
    dist.barrier()


@pytest.fixture(scope="module")
def saved_and_loaded(tmp_path_factory) -> tuple[Path, dict[int, dict]]:
    root = tmp_path_factory.mktemp("uneven")
    run_distributed(save_then_load, WORLD, str(root / "run"), str(root))
    return root / "run", {
        rank: json.loads((root / f"rank{rank}.json").read_text()) for rank in range(WORLD)
    }


def test_each_rank_gets_the_offset_of_the_rows_before_it(saved_and_loaded):
    _, by_rank = saved_and_loaded
    for rank, seen in by_rank.items():
        for key, rows in SAVE_ROWS.items():
            if key == "exp_avg" and rows[rank] == 0:
                assert key not in seen["chunks"]
                continue
            width = list(FULL[key].shape[1:])
            assert seen["chunks"][key] == [
                [sum(rows[:rank])] + [0] * len(width) + [rows[rank]] + width
            ], (rank, key)


def test_offsets_equal_megatron_fsdp_per_tensor_ones(saved_and_loaded):
    _, by_rank = saved_and_loaded
    for rank, seen in by_rank.items():
        assert seen["megatron"] == {key: seen["chunks"][key] for key in seen["megatron"]}, rank


def test_offline_reader_stitches_the_uneven_chunks(saved_and_loaded):
    run_dir, _ = saved_and_loaded
    reader = CheckpointReader(layout.step_dir(run_dir, 1) / "dist_ckpt")
    for key, full in FULL.items():
        entry = reader.tensors[f"model.{key}"]
        assert sorted(c.sizes[0] for c in entry.chunks) == sorted(n for n in SAVE_ROWS[key] if n), (
            key
        )
        assert torch.equal(reader.read_tensor(f"model.{key}"), full), key


def test_load_into_a_different_uneven_layout(saved_and_loaded):
    _, by_rank = saved_and_loaded
    for rank, seen in by_rank.items():
        assert seen["loaded_equal"] and all(seen["loaded_equal"].values()), (
            rank,
            seen["loaded_equal"],
        )


def test_refuses_placements_it_cannot_place(tmp_path):
    run_distributed(refuses_partial, 2, str(tmp_path))
    for rank in range(2):
        message = (tmp_path / f"rank{rank}.txt").read_text()
        assert message.startswith("grad: placements") and "Partial" in message
