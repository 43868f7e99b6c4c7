"""`mfsdp ckpt inspect` of a step that a run's keep_last removes while inspect reads it says
so, as validate and export-hf do, even when no read of it fails: inspect shows what it could
not read (an entry "not decoded", a record's problem) rather than failing on it, so it
printed a description of half a step and exited 0. The step goes as keep_last removes it:
once its metadata was read, before any of its files are."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import megatron_args, megatron_run

REMOVED = "step 100 was removed while it was read (a run still saving with keep_last?)"


@pytest.fixture
def run(tmp_path) -> Path:
    model = tiny_causal_lm("qwen2", vocab=64)
    return megatron_run(tmp_path, model, megatron_args(model))


def _removed_once_its_metadata_was_read(monkeypatch, step: Path) -> None:
    opened = CheckpointReader.__init__

    def opening(self, *args, **kwargs):
        opened(self, *args, **kwargs)
        shutil.rmtree(step, ignore_errors=True)

    monkeypatch.setattr(CheckpointReader, "__init__", opening)


@pytest.mark.parametrize("as_json", [False, True])
def test_inspect_of_a_step_removed_while_read_says_so(run, monkeypatch, as_json):
    step = run / "iter_0000100"
    _removed_once_its_metadata_was_read(monkeypatch, step)
    code, stdout, err = run_cli("ckpt", "inspect", run, *(["--json"] if as_json else []))
    said = f"{step}: {REMOVED}; read it again"
    assert code == 1 and one_error_line(err) == f"error: {said}", stdout + err
    # no description of half a step: the error alone (as JSON with --json)
    assert stdout == (json.dumps({"error": said, "exit_code": 1}) + "\n" if as_json else "")


def test_a_whole_description_of_a_step_removed_after_it_was_read_is_kept(tmp_path):
    """A run saving every few seconds with keep_last removes each step soon after it is
    written: refusing every description made meanwhile made inspect fail on all of them,
    where what it had read was whole. Only a description holding something it could not
    read (a problem, an entry not decoded) is refused."""
    from mfsdp_ckpt.check.describe import records_unread
    from mfsdp_ckpt.check.removed_while_read import CheckpointRemovedError, describes_checkpoint
    from tests.support.export import save_single_process_checkpoint
    from trainer.tiny import build_tiny_model_dir

    run = tmp_path / "run"
    save_single_process_checkpoint(run, build_tiny_model_dir(tmp_path / "assets"), seed=3)
    step = run / "global_step_1"

    def described_then_removed(path, *, role=None, unread=None):
        shutil.copytree(step, tmp_path / "kept", dirs_exist_ok=True)
        shutil.rmtree(step)
        return {"model": {"problem": unread}, "entries": [{"not_decoded": None}]}

    describe = describes_checkpoint(records_unread)(described_then_removed)
    assert describe(run, unread=None) == {
        "model": {"problem": None},
        "entries": [{"not_decoded": None}],
    }
    shutil.copytree(tmp_path / "kept", step)
    with pytest.raises(CheckpointRemovedError, match="step 1 was removed while it was read"):
        describe(run, unread="file is missing")
