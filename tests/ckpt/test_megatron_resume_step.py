"""validate and inspect compare the step a Megatron checkpoint resumes from with the step
its iteration dir names: Megatron-LM's `iteration` entry, Megatron-Bridge's
`iter_N/train_state.pt` `step` (its `iteration` entry without one). A mismatch is an error
naming the record and both numbers; inspect shows it under the step.

Was: `iter_0000100/` holding `iteration` 50 (tracker 100) was "valid ... step 100" and
inspect said step 100, while Megatron-LM resumed at 50.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import (
    bridge_run,
    mcore_weights,
    megatron_args,
    save_dcp,
    train_state,
)

MEGATRON_LM = "its iteration entry (the step Megatron-LM resumes from)"


def _megatron_lm(root: Path, iteration: object, step: int = 100, tracker: str = "") -> Path:
    """A Megatron-LM run whose `iter_<step>/` holds `iteration`."""
    model = tiny_causal_lm("llama", vocab=64)
    run = root / "megatron"
    directory = run / (f"iter_{step:07d}" if step >= 0 else "release")
    state = {"args": megatron_args(model), "iteration": iteration, "model": mcore_weights(model)}
    save_dcp(state, directory)
    (run / "latest_checkpointed_iteration.txt").write_text(tracker or str(step))
    return run


def _errors(run: Path) -> tuple[int, list[tuple[str, str]]]:
    code, out, _ = run_cli("ckpt", "validate", run, "--json")
    findings = json.loads(out)["findings"]
    return code, [(f["where"], f["message"]) for f in findings if f["severity"] == "error"]


def test_an_iteration_other_than_the_dirs_is_an_error_and_shown_by_inspect(tmp_path):
    run = _megatron_lm(tmp_path, iteration=50)
    dcp = run / "iter_0000100"
    problem = f"{MEGATRON_LM} says step 50, but its directory says step 100"
    assert _errors(run) == (1, [(str(dcp), problem)])
    code, out, err = run_cli("ckpt", "inspect", run)
    lines = out.splitlines()
    assert code == 0 and lines[1:3] == ["step        100", f"            {dcp}: {problem}"], err
    code, out, _ = run_cli("ckpt", "inspect", run, "--json")
    assert json.loads(out)["step_problems"] == [f"{dcp}: {problem}"]


def test_the_iteration_of_its_dir_is_valid(tmp_path):
    run = _megatron_lm(tmp_path, iteration=100)
    assert _errors(run) == (0, [])
    code, out, _ = run_cli("ckpt", "inspect", run, "--json")
    assert code == 0 and json.loads(out)["step_problems"] == []


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (None, "holds None (NoneType), not a step number"),
        (-1, "says step -1, and a step is 0 or more"),
        ("100", "holds '100' (str), not a step number"),
    ],
)
def test_an_iteration_that_is_no_step_is_an_error(value, problem, tmp_path):
    run = _megatron_lm(tmp_path, iteration=value)
    assert _errors(run) == (1, [(str(run / "iter_0000100"), f"{MEGATRON_LM} {problem}")])


def test_a_release_is_not_resumed_from_its_iteration(tmp_path):
    """Megatron-LM loads a release without its iteration (import-hf writes 0 there)."""
    run = _megatron_lm(tmp_path, iteration=0, step=-1, tracker="release")
    assert _errors(run) == (0, [])


def _bridge(root: Path) -> Path:
    return bridge_run(root, tiny_causal_lm("llama", vocab=64), steps=(10,))


def test_a_bridge_train_state_of_another_step_is_an_error(tmp_path):
    run = _bridge(tmp_path)
    state = run / "iter_0000010" / "train_state.pt"
    torch.save(train_state(7), state)
    assert _errors(run) == (
        1,
        [
            (
                str(state),
                "its step (the step Megatron-Bridge resumes from) says step 7, but its"
                " directory says step 10",
            )
        ],
    )


def test_a_bridge_train_state_that_cannot_be_read_is_an_error_and_never_blocks(tmp_path):
    run = _bridge(tmp_path)
    state = run / "iter_0000010" / "train_state.pt"
    state.unlink()
    os.mkfifo(state)
    code, errors = _errors(run)
    assert code == 1 and errors == [
        (
            str(state),
            "its step (the step Megatron-Bridge resumes from) cannot be read (a FIFO, not a"
            " regular file)",
        )
    ]


def test_a_bridge_step_without_train_state_resumes_from_its_iteration(tmp_path):
    """Megatron-Bridge builds its train state from the DCP's `iteration` when the
    iteration dir holds no train_state.pt."""
    model = tiny_causal_lm("llama", vocab=64)
    run = bridge_run(tmp_path, model, steps=(10,))
    step = run / "iter_0000010"
    (step / "train_state.pt").unlink()
    save_dcp({"model": mcore_weights(model), "iteration": 4}, step)
    what = "its iteration entry (the step Megatron-Bridge, without a train_state.pt, resumes from)"
    assert _errors(run) == (1, [(str(step), f"{what} says step 4, but its directory says step 10")])
