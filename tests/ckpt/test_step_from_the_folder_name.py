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


@pytest.mark.parametrize(
    ("make", "step"),
    [(_torchtitan_model_only, 20), (lambda root: _megatron(root, False), 100), (_verl, 7)],
    ids=["torchtitan-model-only", "megatron-without-iteration", "verl"],
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
