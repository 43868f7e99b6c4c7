"""A verl FSDP step saved with save_contents=[optimizer, extra] is named as verl's FSDP
format holding no model weights, exit 2 in one line, at every level it is given.

Was: `actor/` holding only `optim_world_size_W_rank_R.pt`, `extra_state_world_size_W_rank_R.pt`,
`fsdp_config.json` and `huggingface/` was "not a checkpoint (looked for .metadata,
dist_ckpt/, ...)": only verl's model shards marked its format.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from tests.support.interop_layouts import one_error_line, run_cli


def _verl_fsdp_without_model(root: Path, hf_weights: bool = False) -> Path:
    """RUN/global_step_3/actor/ as verl's FSDP checkpoint manager saves it with
    save_contents=[optimizer, extra] (with `hf_weights`, hf_model too); the actor dir."""
    actor = root / "run" / "global_step_3" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    for rank in range(2):
        torch.save({}, actor / f"optim_world_size_2_rank_{rank}.pt")
        torch.save({}, actor / f"extra_state_world_size_2_rank_{rank}.pt")
    (actor / "fsdp_config.json").write_text(json.dumps({"world_size": 2}))
    (actor / "huggingface" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    if hf_weights:
        save_file({"w": torch.zeros(2)}, actor / "huggingface" / "model.safetensors")
    (root / "run" / "latest_checkpointed_iteration.txt").write_text("3")
    return actor


@pytest.mark.parametrize("level", ["run", "step", "actor"])
@pytest.mark.parametrize("command", ["validate", "inspect"])
def test_verl_fsdp_step_without_model_is_named(command, level, tmp_path):
    actor = _verl_fsdp_without_model(tmp_path)
    given = {"run": actor.parent.parent, "step": actor.parent, "actor": actor}[level]
    code, _, err = run_cli("ckpt", command, given)
    line = one_error_line(err)
    assert code == 2, err
    assert (
        f"{actor}: a verl FSDP checkpoint holding no model weights"
        " (extra_state_world_size_2_rank_0.pt, extra_state_world_size_2_rank_1.pt (+2 more):"
        " saved with checkpoint.save_contents without 'model'), which mfsdp does not read"
    ) in line, line
    assert "not a checkpoint" not in line


def test_its_hugging_face_weights_are_pointed_at(tmp_path):
    actor = _verl_fsdp_without_model(tmp_path, hf_weights=True)
    code, _, err = run_cli("ckpt", "validate", actor)
    line = one_error_line(err)
    assert code == 2 and line.endswith(
        f"; its huggingface/ holds the model's weights as a Hugging Face dir: give"
        f" model.path={actor / 'huggingface'} (or load it with transformers)"
    ), line
