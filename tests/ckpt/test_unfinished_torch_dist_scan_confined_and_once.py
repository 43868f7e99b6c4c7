"""The search of a `.metadata` for megatron-core's signs (`is_unfinished_torch_dist`)
stays inside the step the DCP dir lies in, and searches each file once per command.

Was: a verl step's `actor/dist_ckpt` linking out of the step had the `.metadata` out there
searched (up to 1 GiB read), so the verdict hung on a file outside the checkpoint: one
holding a SavePlan named the step "a Megatron torch_dist save that did not finish", where
a plain DCP there gave the usual "resolves outside". And each step dir newer than the
tracker had its whole `.metadata` searched three times by one `ckpt inspect` (0.9 s ->
40 s with two 1 GiB files).
"""

from __future__ import annotations

import io
import json
import os
import pickle
from pathlib import Path

import torch
from torch.distributed.checkpoint.planner import SavePlan

from mfsdp_ckpt.format.run_steps import LINKED_OUT, step_states, unfinished_save
from mfsdp_ckpt.format.unfinished_torch_dist import SCANS, is_unfinished_torch_dist
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import save_dcp


def _torch_dist_save(target: Path) -> Path:
    """A torch_dist DCP as megatron-core leaves it before its finalize (no metadata.json):
    its ranks' SavePlans in the `.metadata`."""
    state = {
        "decoder.layers.mlp.linear_fc2.weight": torch.zeros(2, 4, 4),
        "common_state/shard_0_1": io.BytesIO(pickle.dumps({"iteration": 10})),
    }
    save_dcp(state, target)
    metadata = pickle.loads((target / ".metadata").read_bytes())
    metadata.all_local_plans = [SavePlan(items=[])]
    (target / ".metadata").write_bytes(pickle.dumps(metadata))
    return target


def _verl_run_linking_out(tmp_path: Path) -> Path:
    """A verl run whose tracked step's `actor/dist_ckpt` links to a torch_dist save
    outside the step."""
    _torch_dist_save(tmp_path / "outside")
    run = tmp_path / "run"
    actor = run / "global_step_10" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    (actor / "huggingface" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (run / "latest_checkpointed_iteration.txt").write_text("10")
    (actor / "dist_ckpt").symlink_to(Path("..", "..", "..", "outside"))
    return run


def test_a_dist_ckpt_linking_out_of_its_step_is_not_searched(tmp_path):
    run = _verl_run_linking_out(tmp_path)
    before = SCANS.searched
    for command in ("validate", "inspect"):
        code, out, err = run_cli("ckpt", command, run)
        assert code == 1, (out, err)
        assert "dist_ckpt: resolves outside" in out + err, (out, err)
        assert "did not finish" not in out + err, (out, err)
    assert SCANS.searched == before  # the file outside was never searched
    # a role dir linking out is confined the same way; so is a dir reached through it
    step = tmp_path / "run2" / "global_step_10"
    step.mkdir(parents=True)
    (step / "actor").symlink_to(tmp_path / "elsewhere")
    _torch_dist_save(tmp_path / "elsewhere" / "dist_ckpt")
    dcp = step / "actor" / "dist_ckpt"
    assert not is_unfinished_torch_dist(dcp, sorted(os.listdir(dcp)))
    # a link above the step (the run named through one) leads nowhere out of it
    (tmp_path / "run_link").symlink_to(tmp_path / "run3")
    inside = _torch_dist_save(tmp_path / "run3" / "global_step_10" / "actor" / "dist_ckpt")
    through = tmp_path / "run_link" / "global_step_10" / "actor" / "dist_ckpt"
    assert is_unfinished_torch_dist(through, sorted(os.listdir(inside)))


def test_each_metadata_is_searched_once_per_command(tmp_path):
    """Two step dirs past the tracker, each a 64 MiB `.metadata` (sparse): one `ckpt
    inspect` searches each step's once (the tracked one's too, read as the checkpoint);
    a file rewritten since is searched again."""
    run = tmp_path / "run"
    for step in (1, 2, 3):
        save_dcp(
            {"model": {"embedding.word_embeddings.weight": torch.zeros(4, 4)}, "iteration": step},
            run / f"iter_{step:07d}",
        )
    (run / "latest_checkpointed_iteration.txt").write_text("1")
    newer = [run / "iter_0000002" / ".metadata", run / "iter_0000003" / ".metadata"]
    for metadata in newer:
        os.truncate(metadata, 64 << 20)
    before = SCANS.searched
    code, out, err = run_cli("ckpt", "inspect", run)
    assert code == 0, (out, err)
    assert "2 newer step dirs are here" in out + err, (out, err)
    steps = 3
    assert SCANS.searched == before + steps
    step = newer[0].parent
    assert not is_unfinished_torch_dist(step, sorted(os.listdir(step)))
    assert SCANS.searched == before + steps
    os.utime(newer[0], ns=(1, 1))  # rewritten: another file as far as its stat tells
    assert not is_unfinished_torch_dist(step, sorted(os.listdir(step)))
    assert SCANS.searched == before + steps + 1


def test_a_step_linking_out_is_judged_by_nothing_outside(tmp_path):
    """A step whose `actor/dist_ckpt` links out is no save that did not finish, whatever
    lies outside (a torch_dist save, or a dir without `.metadata`): reading it names the
    link. Was: each verdict hung on the outside dir's files."""
    _torch_dist_save(tmp_path / "megatron")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "__0_0.distcp").touch()
    for outside in ("megatron", "empty"):
        run = tmp_path / f"run_{outside}"
        (run / "global_step_10" / "actor").mkdir(parents=True)
        (run / "global_step_10" / "actor" / "dist_ckpt").symlink_to(tmp_path / outside)
        assert unfinished_save(run / "global_step_10") is None, outside
        assert step_states(run, ["global_step_10"]) == {"global_step_10": LINKED_OUT}, outside
