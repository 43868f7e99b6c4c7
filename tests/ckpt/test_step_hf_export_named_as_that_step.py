"""The Hugging Face export a training checkpoint saves inside itself, given where a
checkpoint is read, is named as that step's export, with the checkpoint to give.

Megatron-Bridge's `iter_N/hf/` (also_save_hf_checkpoint) and verl's `huggingface/` holding
weights (mbridge's save, v2's model/huggingface/) were "a Hugging Face model dir ... to make
one from it: mfsdp ckpt import-hf": a new checkpoint made of weights whose training
checkpoint lay one level up.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli, verl_rl_v2
from tests.support.megatron_checkpoints import STEP, bridge_run, verl_bridge_run

COMMANDS = [("validate",), ("export-hf", "--out", "OUT")]


def _refused(command: tuple[str, ...], given: Path, out: Path) -> str:
    args = [out if arg == "OUT" else arg for arg in command]
    code, stdout, err = run_cli("ckpt", args[0], given, *args[1:])
    assert code == 2, stdout + err
    return one_error_line(err)


@pytest.fixture(scope="module")
def model():
    return tiny_causal_lm("qwen2")


@pytest.mark.parametrize("command", COMMANDS)
def test_bridge_hf_dir_is_named_as_its_steps_export(command, model, tmp_path):
    step = bridge_run(tmp_path, model, steps=(10,)) / "iter_0000010"
    model.save_pretrained(step / "hf")
    line = _refused(command, step / "hf", tmp_path / "out")
    assert "Megatron-Bridge's Hugging Face export of step 10" in line, line
    assert f"its training checkpoint is {step}: give that" in line, line
    assert "import-hf" not in line, line
    code, out, err = run_cli("ckpt", "validate", step)
    assert code == 0, out + err


@pytest.mark.parametrize("command", COMMANDS)
def test_verl_huggingface_with_weights_is_named_as_its_steps_export(command, model, tmp_path):
    actor = verl_bridge_run(tmp_path, model) / f"global_step_{STEP}" / "actor"
    model.save_pretrained(actor / "huggingface")
    line = _refused(command, actor / "huggingface", tmp_path / "out")
    assert f"verl's Hugging Face export of step {STEP}" in line, line
    assert f"its training checkpoint is {actor}: give that" in line, line


def test_an_export_beside_a_checkpoint_mfsdp_does_not_read_names_only_the_weights(model, tmp_path):
    """verl's Megatron save as a torch_dist dist_ckpt (which mfsdp does not read): the
    export is what to use, and the checkpoint is not offered to validate or export."""
    actor = verl_bridge_run(tmp_path, model) / f"global_step_{STEP}" / "actor"
    marker = {"sharded_backend": "torch_dist", "sharded_backend_version": 1}
    (actor / "dist_ckpt" / "metadata.json").write_text(json.dumps(marker))
    torch.save({}, actor / "dist_ckpt" / "common.pt")
    model.save_pretrained(actor / "huggingface")
    line = _refused(("validate",), actor / "huggingface", tmp_path / "out")
    assert f"verl's Hugging Face export of step {STEP}" in line, line
    assert f"give model.path={actor / 'huggingface'}" in line, line
    assert "give that to validate" not in line, line


def test_verl_v2_model_huggingface_names_the_role_dir(made_optim, tmp_path):
    actor = verl_rl_v2(made_optim, tmp_path).levels["actor"]
    weights = actor / "model" / "huggingface" / "model.safetensors"
    save_file({"lm_head.weight": torch.zeros(2, 2)}, weights)
    line = _refused(("validate",), actor / "model" / "huggingface", tmp_path / "out")
    assert f"its training checkpoint is {actor}: give that" in line, line
    code, out, err = run_cli("ckpt", "validate", actor)
    assert code == 0, out + err


def test_a_hf_dir_of_no_checkpoint_is_still_told_to_import(model, tmp_path):
    for name in ("hf", "huggingface"):  # the names alone make no export of a step
        model.save_pretrained(tmp_path / "iter_x" / name)
        line = _refused(("validate",), tmp_path / "iter_x" / name, tmp_path / "out")
        assert "a Hugging Face model dir, not a training checkpoint" in line, line
        assert "import-hf" in line, line


@pytest.mark.parametrize("command", COMMANDS)
def test_bridge_hf_dir_of_a_pruned_step_is_told_to_import(command, model, tmp_path):
    """A step whose DCP was pruned, its hf/ export kept, holds no checkpoint to give."""
    step = tmp_path / "bridge" / "iter_0000010"
    model.save_pretrained(step / "hf")
    line = _refused(command, step / "hf", tmp_path / "out")
    assert f"import-hf {step / 'hf'} --out DIR" in line, line
    assert "its training checkpoint is" not in line, line
