"""Ranks whose run dir is not one shared directory (each machine's own disk): rank 0 used to
commit a manifest listing the other ranks' shard files, which only their own dirs held, and
the step read as saved though no resume could load it. Now the save fails on every rank in
one line naming those ranks, and rank 0 commits nothing."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from mfsdp_ckpt.checkpoint_failures import CheckpointSaveError
from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.storage.gathered_files import rank_ranges
from tests.support.distributed import run_distributed


def save_into_own_dirs(rank: int, world_size: int, root: str, shared: bool) -> None:
    """Each rank saves step 2 into `root/run` (shared) or `root/run_<rank>` (not); writes
    what it raised to `root/raised_<rank>.json`."""
    run = Path(root) / ("run" if shared else f"run_{rank}")
    state = {"model": {f"w{rank}": torch.full((4,), float(rank))}}
    raised = None
    try:
        Checkpointer(run, strategy="none").save(2, state, contents=("model",))
    except CheckpointSaveError as err:
        raised = {"line": str(err), "every_rank": err.every_rank}
    (Path(root) / f"raised_{rank}.json").write_text(json.dumps(raised))


def _raised(root: Path, world_size: int) -> list[dict | None]:
    return [json.loads((root / f"raised_{r}.json").read_text()) for r in range(world_size)]


def test_a_run_dir_each_rank_holds_alone_fails_the_save_everywhere(tmp_path):
    run_distributed(save_into_own_dirs, 2, str(tmp_path), False)
    raised = _raised(tmp_path, 2)
    assert all(r is not None and r["every_rank"] for r in raised), raised
    assert raised[0]["line"] == raised[1]["line"]
    line = raised[0]["line"]
    assert "\n" not in line
    assert line.startswith(f"{layout.tmp_step_dir(tmp_path / 'run_0', 2)}: ")
    assert "saving step 2 failed: the files of rank(s) 1 (" in line
    assert "not by --node-rank) are not there as those ranks wrote them" in line
    assert "must be on storage every machine sees" in line
    run = tmp_path / "run_0"
    assert not layout.step_dir(run, 2).exists()
    assert not layout.tmp_step_dir(run, 2).exists()
    assert not (run / layout.TRACKER_FILE).exists()


def test_a_shared_run_dir_saves_as_before(tmp_path):
    run_distributed(save_into_own_dirs, 2, str(tmp_path), True)
    assert _raised(tmp_path, 2) == [None, None]
    manifest = json.loads((layout.step_dir(tmp_path / "run", 2) / layout.MANIFEST_FILE).read_text())
    assert any(name.startswith(f"{layout.DIST_CKPT_DIR}/__1_") for name in manifest["files"])


def test_rank_ranges_join_consecutive_ranks():
    assert rank_ranges([7, 0, 2, 3, 4, 5]) == "0, 2-5, 7"
    assert rank_ranges([1]) == "1"
