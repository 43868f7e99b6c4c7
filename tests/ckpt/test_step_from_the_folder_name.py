"""A checkpoint whose files record no step is shown at the step its folder names, saying so.

torchtitan's model-only step (`checkpoint/step-N/`: a bare model state dict, no train_state)
was shown as "step -"; verl's `global_step_N/` and a Megatron `iter_NNNNNNN/` without its
`iteration` entry showed the folder's number as if the checkpoint recorded it. inspect and
validate say where the number came from; a step the files record (Megatron's `iteration`,
mfsdp's manifest) is shown as before.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import save_dcp

HF_WEIGHTS = {"model.embed_tokens.weight": (16, 8), "lm_head.weight": (16, 8)}
MCORE_WEIGHTS = {"module.embedding.word_embeddings.weight": (16, 8)}


def _weights(shapes: dict[str, tuple[int, ...]]) -> dict[str, torch.Tensor]:
    return {name: torch.zeros(shape) for name, shape in shapes.items()}


def _torchtitan_model_only(root: Path) -> tuple[Path, Path]:
    """torchtitan's dump folder whose last save kept the model alone (step-20), beside a
    folder that holds no save yet (step-30): (its checkpoint/ folder, the step read)."""
    folder = root / "outputs" / "checkpoint"
    save_dcp(_weights(HF_WEIGHTS), folder / "step-20")
    (folder / "step-30").mkdir()
    return folder, folder / "step-20"


def _megatron(root: Path, records: bool) -> tuple[Path, Path]:
    run = root / "megatron"
    state: dict = {"model": _weights(MCORE_WEIGHTS)}
    if records:
        state["iteration"] = 100
    save_dcp(state, run / "iter_0000100")
    (run / "latest_checkpointed_iteration.txt").write_text("100")
    return run, run / "iter_0000100"


def _verl(root: Path) -> tuple[Path, Path]:
    actor = root / "verl" / "global_step_7" / "actor"
    save_dcp({"model": _weights(MCORE_WEIGHTS)}, actor / "dist_ckpt")
    return actor, actor / "dist_ckpt"


def _hf_trainer(root: Path, records: bool) -> tuple[Path, Path]:
    """The HF Trainer's checkpoint-5 (its model as Accelerate's FSDP DCP), with or without
    the trainer_state.json that records its global_step."""
    checkpoint = root / "out" / "checkpoint-5"
    save_dcp({"model": _weights(HF_WEIGHTS)}, checkpoint / "pytorch_model_fsdp_0")
    if records:
        (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 5}))
    return checkpoint, checkpoint / "pytorch_model_fsdp_0"


@pytest.mark.parametrize(
    ("make", "step"),
    [
        (_torchtitan_model_only, 20),
        (lambda root: _megatron(root, False), 100),
        (_verl, 7),
        (lambda root: _hf_trainer(root, False), 5),
    ],
    ids=["torchtitan-model-only", "megatron-without-iteration", "verl", "hf-trainer-no-state"],
)
def test_a_step_only_the_folder_names_is_shown_from_it(tmp_path, make, step):
    given, inner = make(tmp_path)
    for path in (given, inner):
        code, out, err = run_cli("ckpt", "inspect", path)
        assert code == 0 and f"\nstep        {step} (from the folder name)\n" in out, out + err
        code, out, err = run_cli("ckpt", "inspect", path, "--json")
        shown = json.loads(out)
        assert (shown["step"], shown["step_from"]) == (step, "folder_name"), out + err
    code, out, err = run_cli("ckpt", "validate", given)
    assert code == 0 and f", step {step} (from the folder name), " in out, out + err
    code, out, err = run_cli("ckpt", "validate", given, "--json")
    shown = json.loads(out)
    assert (shown["step"], shown["step_from"]) == (step, "folder_name"), out + err


def test_a_step_the_files_record_is_shown_plain(tmp_path):
    run, _ = _megatron(tmp_path, True)
    code, out, err = run_cli("ckpt", "inspect", run, "--json")
    shown = json.loads(out)
    assert code == 0 and (shown["step"], shown["step_from"]) == (100, None), out + err
    code, out, err = run_cli("ckpt", "inspect", run)
    assert "\nstep        100\n" in out, out + err


def test_a_trainer_state_records_the_step(tmp_path):
    checkpoint, _ = _hf_trainer(tmp_path, True)
    code, out, err = run_cli("ckpt", "inspect", checkpoint, "--json")
    shown = json.loads(out)
    assert code == 0 and (shown["step"], shown["step_from"]) == (5, None), out + err


def test_a_bare_step_shows_the_step_its_files_record(tmp_path):
    """torchtitan's `step-3/` whose trainer state says 7 was shown "3 (from the folder
    name)" beside an `extra.step` of 7: the files' step is shown, and the disagreement said."""
    step_dir = tmp_path / "checkpoint" / "step-3"
    save_dcp({**_weights(HF_WEIGHTS), "extra": {"step": 7}}, step_dir)
    code, out, err = run_cli("ckpt", "inspect", step_dir, "--json")
    shown = json.loads(out)
    assert code == 0 and (shown["step"], shown["step_from"]) == (7, None), out + err
    assert any(
        "(extra.step) says step 7, but its folder name says step 3" in problem
        for problem in shown["step_problems"]
    ), shown["step_problems"]
    code, out, err = run_cli("ckpt", "validate", step_dir, "--json")
    shown = json.loads(out)
    assert (shown["step"], shown["step_from"]) == (7, None), out + err
    assert any("its folder name says step 3" in f["message"] for f in shown["findings"]), out
