"""A Megatron torch_dist save stopped before its metadata.json (megatron-core writes it
last, in the save's finalize step) is named as a torch_dist save that did not finish.

Was: torch_dist was told by metadata.json alone, so such a dir read as a DCP of ours. Past
a run's tracked step the note offered it ("give RUN/iter_N to read the newer one"), and
given, every command refused it with the restricted unpickler's "refusing to load global
torch.distributed.checkpoint.planner.SavePlan: not an admitted type" and INVALID ... 0
tensors. The save is built here as megatron-core 0.19 writes it: its ranks' SavePlans in
`Metadata.all_local_plans` and its common state as the `common_state/shard_0_1` entry;
each sign alone tells it, and so does an older save's common.pt.
"""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.planner import SavePlan

from mfsdp_ckpt.format.checkpoint_resolution import resolve_checkpoint
from mfsdp_ckpt.format.unfinished_torch_dist import is_unfinished_torch_dist
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import save_dcp

NAMED = "a Megatron torch_dist save that did not finish (no metadata.json"
SIGNS = {
    "plans and common_state": ("plans", "common_state"),
    "plans only": ("plans",),
    "plans, pickle protocol 2": ("plans", "protocol 2"),
    "common_state only": ("common_state",),
    "common.pt of an older save": ("common.pt",),
}


def _torch_dist_save(target: Path, signs: tuple[str, ...] = ("plans", "common_state")) -> Path:
    """A torch_dist DCP as megatron-core leaves it before its finalize: no metadata.json."""
    state: dict = {"decoder.layers.mlp.linear_fc2.weight": torch.zeros(2, 4, 4)}
    if "common_state" in signs:
        state["common_state/shard_0_1"] = io.BytesIO(pickle.dumps({"iteration": 200}))
    save_dcp(state, target)
    if "plans" in signs:  # state_dict_saver.py: global_metadata.all_local_plans = [...]
        metadata_file = target / ".metadata"
        metadata = pickle.loads(metadata_file.read_bytes())
        metadata.all_local_plans = [SavePlan(items=[])]
        protocol = 2 if "protocol 2" in signs else pickle.DEFAULT_PROTOCOL
        metadata_file.write_bytes(pickle.dumps(metadata, protocol=protocol))
    if "common.pt" in signs:
        torch.save({"iteration": 200}, target / "common.pt")
    return target


@pytest.mark.parametrize("signs", SIGNS.values(), ids=list(SIGNS))
def test_given_it_is_named_by_every_command(tmp_path, signs):
    step = _torch_dist_save(tmp_path / "iter_0000200", signs)
    for command in (["validate"], ["inspect"], ["export-hf", "--out", tmp_path / "hf"]):
        code, out, err = run_cli("ckpt", *command, step)
        validate = command == ["validate"]  # an invalid checkpoint: its finding and verdict
        line = one_error_line(out if validate else err)
        assert code == 1 and line == f"error: {step}: {NAMED}, which megatron-core writes" + (
            " last); Megatron's load refuses it too"
        ), (command, out, err)
        assert ("INVALID" in out) == validate and not (tmp_path / "hf").exists(), (command, out)


def test_past_the_tracker_it_is_named_and_never_offered(tmp_path):
    run = tmp_path / "run"
    save_dcp({"iteration": 100, "model": {"w": torch.zeros(2)}}, run / "iter_0000100")
    (run / "latest_checkpointed_iteration.txt").write_text("100")
    _torch_dist_save(run / "iter_0000200")
    paths = resolve_checkpoint(run)
    assert paths.dist_ckpt == run / "iter_0000100", paths
    assert paths.note == (
        f"{run / 'latest_checkpointed_iteration.txt'} names step 100, but iter_0000200/ (step"
        " 200) is newer and holds no metadata.json (a Megatron torch_dist save, whose"
        " metadata.json megatron-core writes last): a save that did not finish; reading step 100"
    ), paths.note


def test_verl_dist_ckpt_is_named_the_same(tmp_path):
    role = tmp_path / "run" / "global_step_10" / "actor"
    _torch_dist_save(role / "dist_ckpt")
    (role / "huggingface").mkdir()
    (role / "huggingface" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (tmp_path / "run" / "latest_checkpointed_iteration.txt").write_text("10")
    for given in (tmp_path / "run", role.parent, role, role / "dist_ckpt"):
        code, out, err = run_cli("ckpt", "validate", given)
        line = one_error_line(out)  # validate's finding
        assert code == 1 and f"{role / 'dist_ckpt'}: {NAMED}" in line, (given, out, err)


def test_a_complete_save_names_the_files_it_has(tmp_path):
    step = _torch_dist_save(tmp_path / "iter_0000200")
    (step / "metadata.json").write_text(json.dumps({"sharded_backend": "torch_dist"}))
    code, _out, err = run_cli("ckpt", "validate", step)
    line = one_error_line(err)
    assert code == 2 and "torch_dist) checkpoint (metadata.json; common.pt in older saves)" in line


def test_the_names_alone_in_a_dcp_of_ours_are_no_sign(tmp_path):
    """Keys spelled as the signs' strings push them as strings, not as the global SavePlan:
    such a DCP is not taken for torch_dist."""
    names = ["SavePlan", "torch.distributed.checkpoint.planner"]
    dcp = save_dcp({name: torch.zeros(2) for name in names}, tmp_path / "dcp")
    assert not is_unfinished_torch_dist(dcp, sorted(p.name for p in dcp.iterdir()))
