"""`checkpoint.resume=PATH` into a run dir that a save after the step resumed would save
over is refused by `mfsdp config check` and by train's launcher, before torch loads, with
the line and exit status train gives (`resume.refuse_saving_over_named_step`, the check
`resume_target` makes at the load).

Only `resume=auto` had its run dir checked up front: a rollback to the run dir's own
step 2 (its step 4 there), or a resume with a file or an empty dir at a later step's name,
passed config check (exit 0) and train refused it once the model was built.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.config_check import check_config
from cli.launch import load_checked_config
from mfsdp_ckpt.errors import EXIT_FAILED, EXIT_USAGE, MfsdpError
from mfsdp_ckpt.format import layout
from tests.ckpt.test_validate_says_what_resume_auto_does import run_with_steps
from tests.support.sft import write_chat_jsonl
from trainer.config import SFTConfig


def _refusals(root: Path, run: Path, resume: Path) -> list[MfsdpError]:
    """What config check and train's launcher each raise for `checkpoint.resume=resume`."""
    given = [
        f"data.train_files=[{write_chat_jsonl(root / 'train.jsonl')}]",
        f"trainer.run_dir={run}",
        f"checkpoint.resume={resume}",
    ]
    raised = []
    for check in (
        lambda: check_config("sft", None, given),
        lambda: load_checked_config(SFTConfig, None, given),
    ):
        with pytest.raises(MfsdpError) as caught:
            check()
        raised.append(caught.value)
    return raised


def test_a_rollback_to_the_run_dirs_own_step_is_refused_before_torch(tmp_path):
    run = run_with_steps(tmp_path, 2, 4)
    for err in _refusals(tmp_path, run, run / "global_step_2"):
        assert err.exit_code == EXIT_USAGE
        assert str(err) == (
            f"{run}: holds its own steps after step 2 (up to {run / 'global_step_4'}); resuming"
            f" {run / 'global_step_2'} into it trains them again and saves over them: give"
            f" checkpoint.resume={run / 'global_step_4'} to continue from step 4, or another"
            " trainer.run_dir (to train again from step 2 here, move global_step_4 away first)"
        )


def test_a_file_at_a_later_steps_name_is_refused_before_torch(tmp_path):
    run = run_with_steps(tmp_path, 2, 4)
    layout.step_dir(run, 6).write_text("user notes\n")
    for err in _refusals(tmp_path, run, run):  # the run dir: its tracked step 4
        assert err.exit_code == EXIT_FAILED
        assert str(err) == (
            f"{run / 'global_step_6'} is a file, not a step dir, and resuming step 4, a"
            " save of step 6 replaces it: move it away"
        )


def test_an_empty_later_step_dir_is_refused_as_a_save_that_did_not_finish(tmp_path):
    run = run_with_steps(tmp_path, 2, 4)
    layout.step_dir(run, 6).mkdir()
    for err in _refusals(tmp_path, run, run / "global_step_4"):
        assert err.exit_code == EXIT_FAILED
        assert str(err) == (
            f"{run / 'global_step_6'} holds no manifest.json, which mfsdp writes last (a save"
            " that did not finish), and resuming step 4, a save of step 6 replaces"
            " it: move it away"
        )


def test_another_runs_step_into_a_new_run_dir_passes(tmp_path):
    other = run_with_steps(tmp_path / "a", 2, 4)
    given = [
        f"data.train_files=[{write_chat_jsonl(tmp_path / 'train.jsonl')}]",
        f"trainer.run_dir={tmp_path / 'new'}",
        f"checkpoint.resume={other / 'global_step_2'}",
    ]
    check_config("sft", None, given)
    load_checked_config(SFTConfig, None, given)
