"""`inspect` of a run dir names an old step whose removal by `checkpoint.keep_last` was
stopped (renamed aside to `.global_step_N.removing-PID`, not yet deleted, holding a step's
gigabytes) as `validate` does: its warning's place and words, in the text and in --json."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from click.testing import CliRunner

from cli.main import app
from mfsdp_ckpt.check.report import WARNING
from mfsdp_ckpt.check.validate import validate_checkpoint
from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.retention import REMOVING_TAG


def _run_with_leftovers(run: Path, count: int) -> list[Path]:
    """A run of steps 1..count+1 whose first `count` steps were renamed aside for removal."""
    for step in range(1, count + 2):
        state = {"model": {"w": torch.full((4,), float(step))}}
        Checkpointer(run, strategy="none").save(step, state, contents=("model",))
    aside = []
    for step in range(1, count + 1):
        step_dir = layout.step_dir(run, step)
        aside.append(step_dir.with_name(f".{step_dir.name}{REMOVING_TAG}{os.getpid()}"))
        step_dir.rename(aside[-1])
    return aside


def _validate_warning(run: Path) -> dict:
    findings = validate_checkpoint(run).findings
    (found,) = [f for f in findings if f.severity == WARNING and REMOVING_TAG in f.where]
    return {"where": found.where, "message": found.message}


def test_inspect_json_warns_of_a_leftover_as_validate_does(tmp_path):
    run = tmp_path / "run"
    aside = _run_with_leftovers(run, 2)
    shown = CliRunner().invoke(app, ["ckpt", "inspect", str(run), "--json"])
    assert shown.exit_code == 0, shown.output
    warnings = json.loads(shown.stdout)["warnings"]
    assert warnings == [_validate_warning(run)]
    assert warnings[0]["where"] == str(aside[0]) and "1 more like it" in warnings[0]["message"]


def test_inspect_text_says_the_leftover_in_a_warning_line(tmp_path):
    run = tmp_path / "run"
    _run_with_leftovers(run, 1)
    shown = CliRunner().invoke(app, ["ckpt", "inspect", str(run)])
    assert shown.exit_code == 0, shown.output
    warning = _validate_warning(run)
    line = f"warning     {warning['where']}: {warning['message']}"
    assert line in shown.stdout.splitlines(), shown.stdout


def test_a_run_without_leftovers_has_no_warning(tmp_path):
    run = tmp_path / "run"
    _run_with_leftovers(run, 0)
    shown = CliRunner().invoke(app, ["ckpt", "inspect", str(run), "--json"])
    assert json.loads(shown.stdout)["warnings"] == []
    assert "warning " not in CliRunner().invoke(app, ["ckpt", "inspect", str(run)]).stdout
