"""Every reader of a step that a run's keep_last may delete meanwhile says so: export-hf,
inspect and a resume, as validate did, in one line, exit 1, "read it again".

Was: only validate said "step N was removed while it was read"; export-hf of a run whose
step went mid-read said `.../__0_1.distcp: file is missing`, which reads as damage.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from mfsdp_ckpt.check.removed_while_read import CheckpointRemovedError
from mfsdp_ckpt.format import checkpoint_resolution
from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import megatron_args, megatron_run
from trainer.resume import resume_if_any
from trainer.sft import SFT_RUN

REMOVED = "step 100 was removed while it was read (a run still saving with keep_last?)"


@pytest.fixture
def run(tmp_path) -> Path:
    model = tiny_causal_lm("qwen2", vocab=64)
    return megatron_run(tmp_path, model, megatron_args(model))


def _removed_once_read(monkeypatch, step: Path) -> None:
    """The step dir goes as soon as its metadata was read, as keep_last removes it."""
    opened = CheckpointReader.__init__

    def opening(self, *args, **kwargs):
        opened(self, *args, **kwargs)
        shutil.rmtree(step, ignore_errors=True)

    monkeypatch.setattr(CheckpointReader, "__init__", opening)


@pytest.mark.parametrize("command", [("ckpt", "export-hf"), ("ckpt", "validate")])
def test_a_command_reading_a_step_removed_meanwhile_says_so(command, run, tmp_path, monkeypatch):
    step = run / "iter_0000100"
    _removed_once_read(monkeypatch, step)
    out = ("--out", str(tmp_path / "hf")) if "export-hf" in command else ()
    code, stdout, err = run_cli(*command, run, *out)
    line = one_error_line(err)
    assert code == 1 and line == f"error: {step}: {REMOVED}; read it again", stdout + err


def test_inspect_of_a_step_removed_meanwhile_says_so(run, monkeypatch):
    step = run / "iter_0000100"
    monkeypatch.setattr(  # gone as its record is read, after the metadata
        "mfsdp_ckpt.check.describe.describe_recorded_model",
        lambda *args: (shutil.rmtree(step), CheckpointReader(step / "missing"))[1],
    )
    code, _, err = run_cli("ckpt", "inspect", run)
    assert code == 1 and one_error_line(err) == f"error: {step}: {REMOVED}; read it again", err


def test_a_resume_from_a_step_removed_meanwhile_says_so(run):
    found = checkpoint_resolution.resolve_checkpoint(run)

    class Saver:  # the checkpointer's resume side: the step goes while it loads
        run_dir = run

        def find_resume(self, resume):
            return found

        def load(self, paths, states):
            shutil.rmtree(paths.step_dir)
            raise FileNotFoundError(2, "No such file or directory", str(paths.dist_ckpt))

    with pytest.raises(CheckpointRemovedError, match=re.escape(f"{REMOVED}; read it again")):
        resume_if_any(Saver(), str(run), {"extra": {}}, kind=SFT_RUN)
