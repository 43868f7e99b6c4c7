"""verl's default Megatron save (mbridge, use_dist_checkpointing=False) in its v2 layout:
the model as Hugging Face safetensors in model/huggingface/, the optimizer state and the
extra (RNG) state in torch_dist saves of their own, optimizer/dist_ckpt/ and
extra/dist_ckpt/, model/dist_ckpt/ left empty, ckpt_contents.json written last."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from tests.support.megatron_checkpoints import save_dcp
from tests.support.paths import FIXTURES

PARAM = "decoder.final_layernorm.weight"
OPTIMIZER_STATE = {"optimizer": {"state": {f"exp_avg.{PARAM}": torch.zeros(4)}}}
# megatron-core's ShardedObject of each rank's RNG states: all verl's extra/dist_ckpt holds
RNG_STATE = {"rng_state/shard_0_1": [{"random_rng_state": (3, (1, 2), None)}]}


def torch_dist(state: dict, dcp: Path) -> Path:
    """`state` saved into `dcp` as megatron-core's torch_dist save lays it out."""
    save_dcp(state, dcp)
    (dcp / "metadata.json").write_text(
        json.dumps({"sharded_backend": "torch_dist", "sharded_backend_version": 1})
    )
    torch.save({}, dcp / "common.pt")
    return dcp


def verl_v2_mbridge_step(root: Path, optimizer: bool = True) -> Path:
    """RUN/global_step_3/actor as verl's v2 mbridge save writes it: optimizer/dist_ckpt/
    (unless not `optimizer`: save_contents [model, extra]) and extra/dist_ckpt/ beside
    model/huggingface/; the actor dir."""
    run = root / "run"
    actor = run / "global_step_3" / "actor"
    if optimizer:
        torch_dist(OPTIMIZER_STATE, actor / "optimizer" / "dist_ckpt")
    torch_dist(RNG_STATE, actor / "extra" / "dist_ckpt")
    hf = actor / "model" / "huggingface"
    hf.mkdir(parents=True)
    shutil.copy2(FIXTURES / "mcore_optim" / "qwen2" / "config.json", hf / "config.json")
    save_file({"model.norm.weight": torch.ones(4)}, str(hf / "model.safetensors"))
    (actor / "model" / "dist_ckpt").mkdir()
    (actor / "transformer_config.json").write_text(json.dumps({"num_layers": 2}))
    saved = ["model", "optimizer", "extra"] if optimizer else ["model", "extra"]
    contents = {
        "schema_version": 2,
        "framework": "megatron",
        "save_contents": saved,
        "backend": {"has_bridge": True, "use_dist_checkpointing": False, "peft": False},
        "contents": {
            "model": {"path": "model/huggingface", "format": "huggingface"},
            "optimizer": {"path": "optimizer/dist_ckpt", "format": "megatron_dist_checkpoint"},
        },
    }
    (actor / "ckpt_contents.json").write_text(json.dumps(contents))
    (actor.parent / "data.pt").write_bytes(b"dataloader state")
    (run / "latest_checkpointed_iteration.txt").write_text("3")
    return actor
