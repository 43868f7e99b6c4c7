"""Reading a run that is still saving with keep_last: a step removed while it is read is a
failed read to retry (exit 1), not a damaged checkpoint; a complete step newer than the
tracker (saved, the tracker not yet updated) is a note, not a warning that fails --strict."""

import json
import shutil
from pathlib import Path

import pytest

from mfsdp_ckpt.format import layout, run_steps, step_saving
from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.reliability.hf_model import hf_model
from tests.support.ckpt_edits import resealed
from tests.support.interop_layouts import run_cli

REMOVED = "step 0 was removed while it was read (a run still saving with keep_last?)"


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """An mfsdp run dir: step 0 (manifest, huggingface/) and its tracker."""
    root = tmp_path_factory.mktemp("run")
    code, _out, err = run_cli(
        "ckpt", "import-hf", hf_model(root), "--out", root / "run", "--layout", "hf"
    )
    assert code == 0, err
    return root / "run"


@pytest.fixture
def copied(run, tmp_path) -> Path:
    return shutil.copytree(run, tmp_path / "run")


def _validate(path: Path, *args: str) -> tuple[int, dict]:
    code, out, _err = run_cli("ckpt", "validate", path, "--json", *args)
    return code, json.loads(out)


def test_a_step_removed_during_the_deep_read_is_a_failed_read(copied, monkeypatch):
    """keep_last removed the step between resolving it and reading its tensors: was INVALID,
    "their data file __0_0.distcp is missing"."""
    readable = CheckpointReader.check_readable  # what the deep read asks of each tensor first

    def removed_first(self, entry):
        shutil.rmtree(layout.step_dir(copied, 0), ignore_errors=True)
        return readable(self, entry)

    monkeypatch.setattr(CheckpointReader, "check_readable", removed_first)
    code, report = _validate(copied, "--deep")
    assert code == 1 and REMOVED in report["error"]


def test_a_data_file_missing_from_a_step_left_alone_is_damage(copied):
    (layout.step_dir(copied, 0) / "dist_ckpt" / "__0_0.distcp").unlink()
    code, report = _validate(copied, "--deep")
    assert code == 1 and not report["valid"]
    assert any("__0_0.distcp is missing" in f["message"] for f in report["findings"])


def test_a_step_the_tracker_moved_past_while_it_was_resolved(copied, monkeypatch):
    """The tracker said 0; by the time the steps were listed the run had saved step 1 and
    removed step 0: "names step 0, which is missing" (INVALID) was no damage either."""
    shutil.copytree(layout.step_dir(copied, 0), layout.step_dir(copied, 1))
    listed = run_steps.list_complete_steps
    calls = []

    def saved_meanwhile(run_dir):
        calls.append(run_dir)
        if len(calls) == 2:  # after the tracker was read
            step_saving.write_tracker(copied, 1)
            shutil.rmtree(layout.step_dir(copied, 0))
        return listed(run_dir)

    monkeypatch.setattr(run_steps, "list_complete_steps", saved_meanwhile)
    code, report = _validate(copied)
    assert code == 1 and "step 0 was removed while it was read" in report["error"]
    assert "the tracker names step 1 now" in report["error"]


def test_a_complete_step_newer_than_the_tracker_is_a_note(copied):
    """mfsdp renames a step into place, then updates the tracker: between the two (or after
    a crash there) the newer step is complete. Resuming starts from the tracker's."""
    newer = shutil.copytree(layout.step_dir(copied, 0), layout.step_dir(copied, 1))
    manifest = json.loads((newer / "manifest.json").read_text())
    (newer / "manifest.json").write_text(json.dumps(resealed({**manifest, "step": 1})))
    code, report = _validate(copied, "--strict")
    assert code == 0 and report["valid"] and report["step"] == 0 and not report["findings"]
    assert "step 1 is complete too" in report["note"]
