"""validate reads the step a checkpoint's trainer state records (`extra.step`, what a resume
continues from) and reports one that is no step, or disagrees with the step its manifest and
its `global_step_N` directory say, as an error naming the checkpoint and the key.

Was: a `global_step_2` whose trainer state said step -5 passed `validate --deep --strict`
(and resumed "steps -5 -> 3")."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.check.validate import validate_checkpoint
from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.format import layout
from tests.support.ckpt_edits import edit_manifest

STEP = 3


def _saved(root: Path, trainer_step: object) -> Path:
    """A run whose step 3 holds `trainer_step` as its trainer state's step."""
    Checkpointer(root, strategy="none").save(
        STEP,
        {"model": {"w": torch.ones(4, 4)}, "extra": {"step": trainer_step}},
        contents=("model", "extra"),
    )
    return root


def _errors(run: Path, deep: bool = False) -> list[tuple[str, str]]:
    report = validate_checkpoint(run, deep=deep)
    return [(f.where, f.message) for f in report.findings if f.severity == "error"]


def test_a_trainer_step_that_agrees_is_valid(tmp_path):
    assert _errors(_saved(tmp_path, STEP), deep=True) == []


STATE = "its trainer state (extra.step)"
BAD = {
    "negative": (-5, f"{STATE} says step -5, and a step is 0 or more"),
    "another step": (2, f"{STATE} says step 2, but its directory says step 3"),
    "a string": ("3", f"{STATE} holds '3' (str), not a step number"),
    "a bool": (True, f"{STATE} holds True (bool), not a step number"),
    "a float": (3.0, f"{STATE} holds 3.0 (float), not a step number"),
}


@pytest.mark.parametrize("deep", [False, True])
@pytest.mark.parametrize("case", list(BAD))
def test_a_trainer_step_that_is_no_step_or_disagrees_is_an_error(tmp_path, case, deep):
    value, message = BAD[case]
    run = _saved(tmp_path, value)
    dist_ckpt = layout.step_dir(run, STEP) / layout.DIST_CKPT_DIR
    assert _errors(run, deep) == [(str(dist_ckpt), message)]


def test_the_manifest_step_is_compared_too(tmp_path):
    """A step dir renamed by hand: its name and its trainer state say 3, its manifest 7 (the
    manifest's own line says so too)."""
    run = _saved(tmp_path, STEP)

    def seven(data: dict) -> None:
        data["step"] = 7

    edit_manifest(layout.step_dir(run, STEP), seven)
    dist_ckpt = str(layout.step_dir(run, STEP) / layout.DIST_CKPT_DIR)
    assert (
        dist_ckpt,
        f"{STATE} says step 3, but its manifest says step 7",
    ) in _errors(run)


def test_a_large_trainer_step_entry_is_not_read(tmp_path):
    """The entry is read through the restricted loader, and only when it is as small as a
    step number is: a 100,000-item list there is named, not loaded."""
    run = _saved(tmp_path, list(range(100_000)))
    dist_ckpt = str(layout.step_dir(run, STEP) / layout.DIST_CKPT_DIR)
    [(where, message)] = _errors(run)
    assert where == dist_ckpt
    assert message.startswith(f"{STATE} is ")
    assert message.endswith("bytes, more than a number takes; not read")
