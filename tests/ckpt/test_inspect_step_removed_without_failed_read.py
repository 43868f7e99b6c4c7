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
