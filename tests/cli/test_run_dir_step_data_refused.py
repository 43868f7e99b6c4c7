"""What a run dir holds at its steps' names is checked against `checkpoint.resume` before
anything starts (`trainer.local_paths.check_run_dir_steps`).

A run dir whose only step lost its manifest (the tracker still naming it) was resumed as
"no checkpoint": `mfsdp train` emptied metrics.jsonl, trained from step 0 and saved over
that step, exit 0. A file at `global_step_2` was ignored until the save of step 2 moved it
aside and failed half done. Both are refused now, in one line naming what is there,
before torch loads and before any file of the run dir changes.
"""

from __future__ import annotations

import pytest

from mfsdp_ckpt.format import layout, step_saving
from tests.support.cli_errors import one_error
from tests.support.fresh_python import mfsdp
from tests.support.paths import EXAMPLES
from tests.support.sft import write_chat_jsonl
from trainer.config import SFTConfig
from trainer.grpo.config import GRPOConfig


def _damaged_run(run):
    """An earlier run's dir: step 2 tracked, its manifest since removed, two metrics records."""
    step = layout.step_dir(run, 2)
    (step / layout.DIST_CKPT_DIR).mkdir(parents=True)
    (step / layout.DIST_CKPT_DIR / ".metadata").write_bytes(b"saved")
    step_saving.write_tracker(run, 2)
    (run / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    return step


def _snapshot(run):
    return {p: p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("cls", [SFTConfig, GRPOConfig])
def test_a_damaged_only_step_is_refused_before_the_run_starts(cls, tmp_path, monkeypatch):
    from cli.launch import load_checked_config

    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    step = _damaged_run(run)
    with pytest.raises(layout.DamagedRunDirError, match=f"names step 2, but {step} holds no"):
        load_checked_config(cls, None, [f"trainer.run_dir={run}"])
    with pytest.raises(layout.DamagedRunDirError, match=f"{step} holds no manifest.json"):
        load_checked_config(cls, None, [f"trainer.run_dir={run}", "checkpoint.resume=disable"])
    (tmp_path / "other").mkdir()  # a dist_ckpt of another run's
    (tmp_path / "other" / ".metadata").write_bytes(b"saved")
    load_checked_config(
        cls, None, [f"trainer.run_dir={run}", f"checkpoint.resume={tmp_path}/other"]
    )


@pytest.mark.parametrize("resume", ["auto", "disable"])
def test_a_file_at_a_step_name_is_refused_before_the_run_starts(resume, tmp_path, monkeypatch):
    from cli.launch import load_checked_config

    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    layout.step_dir(run, 2).write_text("hi\n")
    with pytest.raises(layout.DamagedRunDirError) as caught:
        load_checked_config(
            SFTConfig, None, [f"trainer.run_dir={run}", f"checkpoint.resume={resume}"]
        )
    assert str(caught.value) == (
        f"{run}/global_step_2 is a file, not a step dir, and a run starting afresh here saves"
        " over it: move it away"
    )


def test_an_unfinished_save_alone_starts_afresh(tmp_path, monkeypatch):
    from cli.launch import load_checked_config

    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    layout.tmp_step_dir(run, 2).mkdir(parents=True)
    for resume in ("auto", "disable"):
        load_checked_config(
            SFTConfig, None, [f"trainer.run_dir={run}", f"checkpoint.resume={resume}"]
        )


def test_train_into_a_run_whose_only_step_is_damaged_changes_nothing(tmp_path):
    """The reported run: was exit 0, "removed 2 record(s) of steps 1-2 an earlier run logged;
    this run resumes no checkpoint", and global_step_2 overwritten."""
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=24)
    run = tmp_path / "run"
    step = _damaged_run(run)
    before = _snapshot(run)
    done = mfsdp(
        *["train", "sft", "--config", str(EXAMPLES / "sft_tiny_cpu.yaml")],
        *[f"data.train_files={data}", f"trainer.run_dir={run}", "trainer.total_steps=3"],
        "checkpoint.save_every=1",
    )
    assert done.returncode == 1, done.stderr
    one_error(done.stderr, f"names step 2, but {step} holds no manifest.json")
    assert "loading torch" not in done.stderr
    assert _snapshot(run) == before
