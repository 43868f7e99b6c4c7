"""Real DTensor checkpoints from FSDP2 over gloo: round trip, resharding, offline reads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.format import layout, run_steps
from mfsdp_ckpt.format.manifest import read_manifest
from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.support.distributed import run_distributed
from tests.support.fsdp_workloads import (
    load_and_dump,
    run_single,
    save_twice_async,
    save_uneven_dtensor,
    train_and_save,
)


@pytest.fixture(scope="module")
def two_rank_ckpt(tmp_path_factory) -> tuple[Path, dict]:
    """A 2-process FSDP2 run saved at step 3, plus the full state it had in memory."""
    root = tmp_path_factory.mktemp("two_rank")
    out = root / "state.pt"
    run_distributed(train_and_save, 2, str(root / "run"), 3, str(out))
    return root / "run", torch.load(out)


def assert_same_state(expected: dict, actual: dict, keys) -> None:
    assert keys, "nothing compared"
    for key in keys:
        assert torch.equal(expected[key], actual[key]), key


def test_layout_and_manifest(two_rank_ckpt):
    run, _ = two_rank_ckpt
    assert run_steps.read_tracker(run) == 3
    step = layout.step_dir(run, 3)
    names = sorted(p.name for p in (step / "dist_ckpt").iterdir())
    assert names[0] == ".metadata"
    data_files = [re.fullmatch(r"__(\d+)_(\d+)\.distcp", n) for n in names[1:]]
    assert all(data_files) and {int(m.group(1)) for m in data_files} == {0, 1}
    manifest = read_manifest(step / "manifest.json")
    assert (manifest.step, manifest.world_size, manifest.strategy) == (3, 2, "fsdp2")
    assert manifest.contents == ["model", "optimizer", "extra"]
    assert set(manifest.files) == {f"dist_ckpt/{n}" for n in names} | {"huggingface/config.json"}
    for name, record in manifest.files.items():
        assert (step / name).stat().st_size == record.size
    assert not list(run.glob("*.tmp"))


def test_offline_read_equals_in_memory_state(two_rank_ckpt):
    run, expected = two_rank_ckpt
    reader = CheckpointReader(layout.step_dir(run, 3) / "dist_ckpt")
    model_keys = [k for k in expected if k.startswith("model.")]
    moment_keys = [k for k in expected if k.endswith(("exp_avg", "exp_avg_sq"))]
    assert len(moment_keys) == 2 * len([k for k in model_keys if "lm_head" not in k])
    for key in model_keys + moment_keys:
        entry = reader.tensors[key]
        assert len(entry.chunks) == 2, f"{key} should be sharded across both ranks"
        assert torch.equal(reader.read_tensor(key), expected[key]), key
    assert reader.read_object("extra.step") == 3
    assert reader.read_tensor("extra.rng_rank1").dtype == torch.uint8


def test_reshard_two_to_one(two_rank_ckpt, tmp_path):
    run, expected = two_rank_ckpt
    out = tmp_path / "loaded.pt"
    run_single(load_and_dump, str(run), str(out))
    loaded = torch.load(out)
    assert_same_state(
        expected, loaded, [k for k in expected if k.startswith(("model.", "optimizer.state."))]
    )
    assert loaded["extra.step"].item() == 3


def test_reshard_one_to_two(tmp_path):
    single = tmp_path / "single.pt"
    run_single(train_and_save, str(tmp_path / "run"), 2, str(single))
    out = tmp_path / "loaded.pt"
    run_distributed(load_and_dump, 2, str(tmp_path / "run"), str(out))
    expected, loaded = torch.load(single), torch.load(out)
    assert_same_state(
        expected, loaded, [k for k in expected if k.startswith(("model.", "optimizer.state."))]
    )


def test_async_save_commits_and_round_trips(tmp_path):
    out = tmp_path / "state.pt"
    run_distributed(train_and_save, 2, str(tmp_path / "run"), 2, str(out), True)
    assert run_steps.read_tracker(tmp_path / "run") == 2
    reader = CheckpointReader(layout.step_dir(tmp_path / "run", 2) / "dist_ckpt")
    expected = torch.load(out)
    for key in [k for k in expected if k.startswith("model.")]:
        assert torch.equal(reader.read_tensor(key), expected[key]), key


def test_consecutive_async_saves_each_hold_their_own_step(tmp_path):
    out = tmp_path / "states.pt"
    run_distributed(save_twice_async, 2, str(tmp_path / "run"), str(out))
    for step, expected in zip((1, 2), torch.load(out)):
        reader = CheckpointReader(layout.step_dir(tmp_path / "run", step) / "dist_ckpt")
        keys = [k for k in expected if k.startswith(("model.", "optimizer.state."))]
        assert keys
        for key in keys:
            assert torch.equal(reader.read_tensor(key), expected[key]), (step, key)


@pytest.mark.parametrize("async_save", [False, True])
def test_uneven_shards_with_megatron_style_chunk_hooks(tmp_path, async_save):
    """Megatron-FSDP attaches true (uneven) chunk offsets to local shards; sync and async
    saves must both write those chunks, and the offline reader must stitch them."""
    run_distributed(save_uneven_dtensor, 2, str(tmp_path / "run"), async_save)
    reader = CheckpointReader(layout.step_dir(tmp_path / "run", 1) / "dist_ckpt")
    entry = reader.tensors["model.w"]
    assert sorted(c.sizes for c in entry.chunks) == [(3, 4), (7, 4)]
    assert torch.equal(
        reader.read_tensor("model.w"), torch.arange(40, dtype=torch.float32).reshape(10, 4)
    )
