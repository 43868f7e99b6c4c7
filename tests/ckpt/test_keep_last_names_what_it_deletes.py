"""What a save's `checkpoint.keep_last` deletes that is no complete step of the run (a
`global_step_N` without manifest older than every step kept, an old step whose removal was
stopped) was deleted without a line, and no command warned of it beforehand. Now validate
and inspect warn of each (the same finding), and the prune names each it deletes."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import torch
from click.testing import CliRunner

from cli.main import app
from mfsdp_ckpt.check.report import WARNING
from mfsdp_ckpt.check.validate import validate_checkpoint
from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.format.left_step_names import REMOVING_TAG


def save(run: Path, step: int, keep_last: int | None = None) -> None:
    state = {"model": {"w": torch.full((4,), float(step))}}
    Checkpointer(run, strategy="none", keep_last=keep_last).save(step, state, contents=("model",))


def _without_manifest(run: Path, step: int) -> Path:
    """A copy of the run's newest step as `global_step_<step>`, its manifest gone."""
    partial = layout.step_dir(run, step)
    newest = max(int(p.name.rsplit("_", 1)[1]) for p in run.glob(f"{layout.STEP_DIR_PREFIX}*"))
    shutil.copytree(layout.step_dir(run, newest), partial)
    (partial / layout.MANIFEST_FILE).unlink()
    return partial


def _warnings(run: Path) -> list[dict[str, str]]:
    findings = validate_checkpoint(run).findings
    return [{"where": f.where, "message": f.message} for f in findings if f.severity == WARNING]


def test_validate_and_inspect_warn_of_a_manifestless_step_the_next_save_deletes(tmp_path):
    run = tmp_path / "run"
    for step in (2, 3, 4):
        save(run, step)
    older = _without_manifest(run, 1)
    warned = [w for w in _warnings(run) if w["where"] == str(older)]
    assert len(warned) == 1
    assert "without manifest.json" in warned[0]["message"]
    assert "the next save of this run with checkpoint.keep_last deletes it;" in warned[0]["message"]
    shown = CliRunner().invoke(app, ["ckpt", "inspect", str(run), "--json"])
    assert shown.exit_code == 0, shown.output
    assert warned[0] in json.loads(shown.stdout)["warnings"]
    strict = CliRunner().invoke(app, ["ckpt", "validate", str(run), "--strict"])
    assert strict.exit_code == 1 and str(older) in strict.output


def test_a_manifestless_step_between_steps_is_warned_of_as_deleted_later(tmp_path):
    """With steps 2 and 4 complete, a save with keep_last=3 keeps step 2 and so step 3."""
    run = tmp_path / "run"
    for step in (2, 4):
        save(run, step)
    between = _without_manifest(run, 3)
    (warned,) = [w for w in _warnings(run) if w["where"] == str(between)]
    assert "once every step it keeps is newer" in warned["message"]


def test_a_manifestless_step_newer_than_every_complete_one_is_not_called_deleted(tmp_path):
    """keep_last never deletes it (a resume refuses it instead)."""
    run = tmp_path / "run"
    save(run, 2)
    newer = _without_manifest(run, 5)
    assert [w for w in _warnings(run) if w["where"] == str(newer)] == []


def test_the_prune_names_each_dir_it_deletes_that_is_no_complete_step(tmp_path, caplog):
    run = tmp_path / "run"
    for step in (2, 3, 4):
        save(run, step)
    older = _without_manifest(run, 1)
    leftover = run / f".global_step_0{REMOVING_TAG}{os.getpid()}"
    shutil.copytree(layout.step_dir(run, 2), leftover)
    with caplog.at_level(logging.WARNING, logger="mfsdp_ckpt.checkpointer"):
        save(run, 5, keep_last=2)
    assert not older.exists() and not leftover.exists()
    assert not layout.step_dir(run, 3).exists()  # a complete step keep_last removes: no line
    lines = sorted(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert lines == sorted(
        [
            f"warning: {older}: removed by checkpoint.keep_last (a step dir without"
            " manifest.json, so no complete step)",
            f"warning: {leftover}: removed by checkpoint.keep_last (an old step whose removal"
            " was stopped)",
        ]
    )
