"""verl's default Megatron save (use_mbridge, use_dist_checkpointing=False, v1 layout) keeps
its model as Hugging Face safetensors in actor/huggingface/ and only the optimizer and extra
state in actor/dist_ckpt/ (torch_dist). Every command sent the user to verl's model merger,
which reads the model from dist_ckpt/ and finds none there, and never named the weights
already in huggingface/. Now each route (run, step, role, dist_ckpt; validate and
export-hf) names that dir as the export; a LoRA run's adapter_checkpoint/ is named as the
adapter; a dist_ckpt holding the model, or a huggingface/ without weights, keeps the merger."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.paths import FIXTURES
from tests.support.verl_mbridge_saves import (
    OPTIMIZER_STATE,
    PARAM,
    RNG_STATE,
    torch_dist,
    verl_v2_mbridge_step,
)

MERGER = "verl.model_merger merge --backend megatron"
# What verl's dist_ckpt holds, by save: an MoE model's ChainedOptimizer prefixes each of its
# optimizers' keys with chained_N.; save_contents without optimizer leaves the RNG state
# (extra) or nothing.
_SAVED = {
    "dense": OPTIMIZER_STATE,
    "moe": {"chained_0": OPTIMIZER_STATE, "chained_1": OPTIMIZER_STATE},
    "no-optimizer": RNG_STATE,
    "model-only": {},
}
_HELD = {"dense": "optimizer state only", "moe": "optimizer state only"}


def _verl_mbridge_step(
    root: Path, model_in_dcp: bool = False, weights: bool = True, saved: str = "dense"
) -> Path:
    """RUN/global_step_3/{data.pt, actor/{dist_ckpt/, huggingface/, transformer_config.json}}
    as verl's MegatronCheckpointManager writes it with use_hf_checkpoint: dist_ckpt/ a
    torch_dist save of what `saved` names (`_SAVED`), or with `model_in_dcp` of the model
    too (use_dist_checkpointing=True); huggingface/ the config and, with `weights`, the
    safetensors mbridge's save_hf_weights writes."""
    run = root / "run"
    actor = run / "global_step_3" / "actor"
    state: dict = dict(_SAVED[saved])
    if model_in_dcp:
        state[PARAM] = torch.ones(4)
    torch_dist(state, actor / "dist_ckpt")
    hf = actor / "huggingface"
    hf.mkdir()
    shutil.copy2(FIXTURES / "mcore_optim" / "qwen2" / "config.json", hf / "config.json")
    if weights:
        save_file({"model.norm.weight": torch.ones(4)}, str(hf / "model.safetensors"))
    (actor / "transformer_config.json").write_text(json.dumps({"num_layers": 2}))
    (actor.parent / "data.pt").write_bytes(b"dataloader state")
    (run / "latest_checkpointed_iteration.txt").write_text("3")
    return actor


def _levels(actor: Path) -> list[Path]:
    return [actor.parent.parent, actor.parent, actor, actor / "dist_ckpt"]


@pytest.mark.parametrize("saved", list(_SAVED))
@pytest.mark.parametrize("command", ["validate", "export-hf"])
def test_every_route_names_the_hf_model_as_the_export(tmp_path, command, saved):
    actor = _verl_mbridge_step(tmp_path, saved=saved)
    hf = actor / "huggingface"
    held = _HELD.get(saved, "no tensor")
    for level in _levels(actor):
        extra = ["--out", tmp_path / "out"] if command == "export-hf" else []
        code, stdout, err = run_cli("ckpt", command, level, *extra)
        assert code == 2, stdout + err
        line = one_error_line(err)
        assert f"{actor / 'dist_ckpt'}: " in line, line
        assert f"holding {held} (no model entry" in line, line
        assert f"Hugging Face files in {hf} (weights present there)" in line, line
        assert "already the export" in line and f"model.path={hf}" in line, line
        assert MERGER not in line, line
        assert not (tmp_path / "out").exists()


def test_lora_adapter_checkpoint_is_named(tmp_path):
    actor = _verl_mbridge_step(tmp_path, weights=False)
    adapter = actor / "adapter_checkpoint"
    adapter.mkdir()
    torch.save({"adapter_state_dict": {}}, adapter / "mp_rank_00_adapter.pt")
    code, stdout, err = run_cli("ckpt", "validate", actor.parent.parent)
    assert code == 2, stdout + err
    line = one_error_line(err)
    assert f"its adapter is in {adapter}" in line and "optimizer state only" in line, line
    assert MERGER not in line, line


@pytest.mark.parametrize(
    "case", [{"model_in_dcp": True}, {"weights": False}], ids=["model-in-dcp", "hf-no-weights"]
)
def test_merger_kept_where_it_has_a_model_to_convert(tmp_path, case):
    actor = _verl_mbridge_step(tmp_path, **case)
    code, stdout, err = run_cli("ckpt", "validate", actor)
    assert code == 2, stdout + err
    line = one_error_line(err)
    assert f"{MERGER} --local_dir {actor} --target_dir OUT" in line, line
    assert "optimizer state only" not in line, line


@pytest.mark.parametrize("command", ["validate", "export-hf"])
def test_v2_layout_names_its_hf_model_and_its_optimizer_state(tmp_path, command):
    actor = verl_v2_mbridge_step(tmp_path)
    hf = actor / "model" / "huggingface"
    levels = [*_levels(actor)[:3], actor / "model", actor / "optimizer" / "dist_ckpt"]
    for level in [*levels, actor / "extra" / "dist_ckpt"]:
        extra = ["--out", tmp_path / "out"] if command == "export-hf" else []
        code, stdout, err = run_cli("ckpt", command, level, *extra)
        assert code == 2, stdout + err
        line = one_error_line(err)
        assert f"Hugging Face files in {hf} (weights present there)" in line, line
        assert "already the export" in line and "saved only" not in line, line
        assert "checkpoint_inspector" not in line and MERGER not in line, line
        if level in levels:
            assert f"{actor / 'optimizer' / 'dist_ckpt'}: " in line, line
            assert "optimizer state only" in line, line


def test_v2_hf_export_names_the_step_not_import_hf(tmp_path):
    actor = verl_v2_mbridge_step(tmp_path)
    hf = actor / "model" / "huggingface"
    code, stdout, err = run_cli("ckpt", "validate", hf)
    assert code == 2, stdout + err
    line = one_error_line(err)
    assert "verl's Hugging Face export of step 3" in line and f"model.path={hf}" in line, line
    assert "import-hf" not in line, line


def test_v2_layout_saved_without_optimizer_names_its_hf_model(tmp_path):
    actor = verl_v2_mbridge_step(tmp_path, optimizer=False)
    code, stdout, err = run_cli("ckpt", "validate", actor)
    assert code == 2, stdout + err
    line = one_error_line(err)
    assert f"{actor / 'extra' / 'dist_ckpt'}: " in line and "holding no tensor" in line, line
    assert f"Hugging Face files in {actor / 'model' / 'huggingface'}" in line, line
    assert "saved only" not in line, line
