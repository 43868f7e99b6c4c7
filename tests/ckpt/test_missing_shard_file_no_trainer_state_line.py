"""A step whose data file holding trainer-state entries is missing is reported once, as
missing, with no line about what those entries hold: nothing was read from them.

Was: "its trainer state holds global_batch_size=<object object at 0x...>, not an integer"
beside "referenced by .metadata but missing" (validate, validate --deep, inspect): the
placeholder for "not there" was judged as the field's value."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.check.describe import describe_checkpoint
from mfsdp_ckpt.check.validate import validate_checkpoint
from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.storage.reader import CheckpointReader

STEP = 2
STATE = {"step": STEP, "global_batch_size": 6, "train_rows": 60, "seed": 1, "shuffle": 1}


def _step_without_its_data_file(root: Path) -> Path:
    """A run's step 2 with a full trainer state, the data file that holds its
    `extra.global_batch_size` deleted (the save writes several: the others stay)."""
    Checkpointer(root, strategy="none").save(
        STEP, {"model": {"w": torch.ones(4, 4)}, "extra": dict(STATE)}, contents=("model", "extra")
    )
    dist_ckpt = layout.step_dir(root, STEP) / layout.DIST_CKPT_DIR
    held_in = CheckpointReader(dist_ckpt).objects["extra.global_batch_size"].file
    assert held_in is not None
    (dist_ckpt / held_in).unlink()
    return dist_ckpt


@pytest.mark.parametrize("deep", [False, True])
def test_validate_says_the_file_is_missing_and_nothing_about_its_fields(tmp_path, deep):
    _step_without_its_data_file(tmp_path)
    report = validate_checkpoint(tmp_path, deep=deep)
    errors = [f.message for f in report.findings if f.severity == "error"]
    assert any("missing" in message for message in errors), errors
    assert [m for m in errors if "trainer state" in m or "object at" in m] == []


def test_inspect_lists_no_step_problem_for_entries_not_read(tmp_path):
    _step_without_its_data_file(tmp_path)
    assert describe_checkpoint(tmp_path)["step_problems"] == []
