"""A verl FSDP step missing a rank's `model_world_size_W_rank_R.pt` is named as a save that
did not finish (exit 1), with the missing shard and the run's other step dirs; verl's
merger, which loads every rank's shard, cannot convert it.

Was: sent to `python -m verl.model_merger merge --backend fsdp` as a complete checkpoint
(exit 2), with no word of the missing rank.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from tests.support.interop_layouts import one_error_line, run_cli


def _verl_fsdp_step(run: Path, step: int, ranks: range, world: int = 2) -> Path:
    """RUN/global_step_<step>/actor/ as verl's FSDP checkpoint manager saves it, with the
    model shards of `ranks` only (and huggingface/ holding weights); the actor dir."""
    actor = run / f"global_step_{step}" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    for rank in range(world):
        torch.save({}, actor / f"optim_world_size_{world}_rank_{rank}.pt")
    for rank in ranks:
        torch.save({}, actor / f"model_world_size_{world}_rank_{rank}.pt")
    (actor / "fsdp_config.json").write_text(json.dumps({"world_size": world}))
    (actor / "huggingface" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    save_file({"w": torch.zeros(2)}, actor / "huggingface" / "model.safetensors")
    (run / "latest_checkpointed_iteration.txt").write_text(str(step))
    return actor


@pytest.mark.parametrize("level", ["run", "step"])
def test_a_step_missing_a_rank_shard_is_an_unfinished_save(level, tmp_path):
    run = tmp_path / "run"
    _verl_fsdp_step(run, 4, range(2))
    actor = _verl_fsdp_step(run, 6, range(1))
    given = {"run": run, "step": actor.parent}[level]
    code, out, err = run_cli("ckpt", "inspect", given)
    line = one_error_line(err)
    assert code == 1, out + err
    assert (
        f"{actor}: a verl FSDP checkpoint missing model_world_size_2_rank_1.pt (1 of its 2 ranks'"
        " model shards): a save that did not finish, which verl's merger cannot convert either"
        " (other step dirs here: global_step_4)"
    ) in line, line
    assert "model_merger" not in line


def test_missing_shards_of_a_large_world_are_counted(tmp_path):
    actor = _verl_fsdp_step(tmp_path / "run", 2, [0, 1, 3], world=8)
    code, _out, err = run_cli("ckpt", "inspect", actor)
    line = one_error_line(err)
    assert code == 1, err
    assert line.endswith(
        f"{actor}: a verl FSDP checkpoint missing model_world_size_8_rank_2.pt,"
        " model_world_size_8_rank_4.pt (+3 more) (5 of its 8 ranks' model shards): a save that"
        " did not finish, which verl's merger cannot convert either"
    ), line


def test_a_complete_step_gives_the_merger_and_the_hf_dir_to_pass(tmp_path):
    actor = _verl_fsdp_step(tmp_path / "run", 4, range(2))
    code, _out, err = run_cli("ckpt", "inspect", actor)
    line = one_error_line(err)
    assert code == 2, err
    assert f"--local_dir {actor} --target_dir OUT`" in line, line
    hf = actor / "huggingface"
    assert line.endswith(f"huggingface/ already holds Hugging Face weights: give model.path={hf}")
