"""A training run's dir that holds no checkpoint yet is named as such, with the process
training it when one holds its lock; "not a checkpoint (looked for .metadata, ...)" left the
user to work out that the run had not saved yet."""

from __future__ import annotations

import os

import pytest

from mfsdp_ckpt.storage.lock_holder import lock_holder
from mfsdp_ckpt.storage.out_lock import acquire_out_lock, release_out_lock
from tests.support.interop_layouts import one_error_line, run_cli


@pytest.fixture
def run(tmp_path):
    """What `mfsdp train sft` writes into its run dir before the first save."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("trainer:\n  run_dir: run\n")
    (run / "metrics.jsonl").write_text('{"step": 1, "train/loss": 5.0}\n')
    return run


@pytest.mark.parametrize(
    "command", [["export-hf", "--out", "hf"], ["validate"], ["inspect"]], ids=lambda c: c[0]
)
def test_a_run_without_steps_is_named_as_such(run, tmp_path, command):
    code, out, err = run_cli("ckpt", command[0], run, *command[1:])
    assert code == 2, out + err
    assert one_error_line(err) == f"error: {run}: is a training run with no checkpoint saved yet"
    assert not (tmp_path / "hf").exists()


def test_the_process_training_it_is_named(run):
    held = acquire_out_lock(run)  # as `mfsdp train` holds it while the run trains
    try:
        code, out, err = run_cli("ckpt", "export-hf", run, "--out", run.parent / "hf")
    finally:
        release_out_lock(run, held)
    assert code == 2, out + err
    assert one_error_line(err) == (
        f"error: {run}: is a training run with no checkpoint saved yet (pid {os.getpid()} is"
        " training it now)"
    )


def test_an_empty_run_dir_is_known_by_its_lock(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    held = acquire_out_lock(run)
    try:
        code, _, err = run_cli("ckpt", "validate", run)
    finally:
        release_out_lock(run, held)
    assert code == 2
    assert "is a training run with no checkpoint saved yet" in one_error_line(err)


def test_who_holds_a_lock(tmp_path):
    out = tmp_path / "out"
    assert lock_holder(out) is None
    held = acquire_out_lock(out)
    try:
        assert lock_holder(out) == os.getpid()
    finally:
        release_out_lock(out, held)
    assert lock_holder(out) is None


def test_a_dir_that_is_no_run_is_still_not_a_checkpoint(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    code, _, err = run_cli("ckpt", "validate", tmp_path)
    assert code == 2 and f"{tmp_path}: not a checkpoint (looked for" in one_error_line(err)
