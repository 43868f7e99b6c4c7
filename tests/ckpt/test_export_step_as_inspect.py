"""export-hf --json names the step of the checkpoint it read as inspect does, and where from.

Was: a torchtitan model-only `step-N/` (a bare model state dict, no trainer step in its
files) exported with `"step": null`, while inspect said `N (from the folder name)`; verl's
`global_step_N/`, a Megatron `iter_NNNNNNN/` without its `iteration` entry and an HF Trainer
`checkpoint-N/` without trainer_state.json exported their folder's number with nothing
saying that only the folder's name gave it. export-hf now reports inspect's `step` and
`step_from` (one function gives both), a step the files record as plainly as inspect does.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import mcore_weights, megatron_args, save_dcp


def _hf_weights(model) -> dict:
    return {name: value.clone() for name, value in model.state_dict().items()}


def _torchtitan(root: Path, model) -> Path:
    """torchtitan's model-only last step: a bare model state dict in `checkpoint/step-20`."""
    step = root / "outputs" / "checkpoint" / "step-20"
    save_dcp(_hf_weights(model), step)
    return step


def _verl(root: Path, model) -> Path:
    actor = root / "verl" / "global_step_7" / "actor"
    save_dcp({"model": _hf_weights(model)}, actor / "dist_ckpt")
    return actor


def _hf_trainer(root: Path, model) -> Path:
    """The HF Trainer's checkpoint-5 (Accelerate's FSDP DCP) without trainer_state.json."""
    checkpoint = root / "out" / "checkpoint-5"
    save_dcp({"model": _hf_weights(model)}, checkpoint / "pytorch_model_fsdp_0")
    return checkpoint


def _megatron(root: Path, model, records: bool) -> Path:
    """Megatron-LM's iter_0000100 with its args, its `iteration` entry only if `records`."""
    run = root / "megatron"
    state: dict = {"args": megatron_args(model), "model": mcore_weights(model)}
    if records:
        state["iteration"] = 100
    save_dcp(state, run / "iter_0000100")
    (run / "latest_checkpointed_iteration.txt").write_text("100")
    return run


def _steps(tmp_path: Path, make: Callable[[Path, object], Path]) -> tuple[tuple, tuple]:
    """(step, step_from) of inspect --json and of export-hf --json of what `make` saves."""
    model = tiny_causal_lm("llama", vocab=64)
    model.config.save_pretrained(tmp_path / "config")
    ckpt = make(tmp_path, model)
    code, out, err = run_cli("ckpt", "inspect", ckpt, "--json")
    assert code == 0, out + err
    shown = json.loads(out)
    args = ("--out", tmp_path / "hf", "--hf-config", tmp_path / "config", "--json")
    code, out, err = run_cli("ckpt", "export-hf", ckpt, *args)
    assert code == 0, out + err
    exported = json.loads(out)
    return (shown["step"], shown["step_from"]), (exported["step"], exported["step_from"])


@pytest.mark.parametrize(
    ("make", "step", "step_from"),
    [
        (_torchtitan, 20, "folder_name"),
        (_verl, 7, "folder_name"),
        (_hf_trainer, 5, "folder_name"),
        (lambda root, model: _megatron(root, model, False), 100, "folder_name"),
        (lambda root, model: _megatron(root, model, True), 100, None),
    ],
    ids=["torchtitan", "verl", "hf-trainer", "megatron-without-iteration", "megatron"],
)
def test_export_reports_the_step_inspect_shows(tmp_path, make, step, step_from):
    shown, exported = _steps(tmp_path, make)
    assert shown == exported == (step, step_from)
