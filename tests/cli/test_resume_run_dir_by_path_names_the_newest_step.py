"""`checkpoint.resume=RUN` (the run dir by path) whose tracker names a step older than its
newest complete one is refused (exit 2) naming `checkpoint.resume=RUN/global_step_N`, the
newest step, as the setting that continues the run. It advised `checkpoint.resume=auto`,
which resumes the tracker's step and trains over the newer ones: a false way on. Auto over
the same run dir passes `mfsdp config check` and the launcher: it resumes the tracker's step
over any complete steps past it, as verl and Megatron-LM do, and says so in a note."""

from __future__ import annotations

import pytest

from cli.config_check import check_config
from cli.launch import load_checked_config
from mfsdp_ckpt.errors import EXIT_USAGE
from mfsdp_ckpt.format import step_saving
from tests.ckpt.test_validate_says_what_resume_auto_does import run_with_steps
from tests.cli.test_config_check_refuses_resume_path_over_run_dir_steps import _refusals
from tests.support.sft import write_chat_jsonl
from trainer.config import SFTConfig


@pytest.mark.parametrize("steps", [(2, 3), (2, 3, 4)], ids=["one past", "two past"])
def test_the_run_dir_by_path_names_the_newest_step_to_continue(tmp_path, steps):
    run = run_with_steps(tmp_path, *steps)
    step_saving.write_tracker(run, 2)
    newest = run / f"global_step_{steps[-1]}"
    for err in _refusals(tmp_path, run, run):
        assert err.exit_code == EXIT_USAGE
        assert f"give checkpoint.resume={newest} to continue from step {steps[-1]}," in str(err)
        assert "checkpoint.resume=auto" not in str(err)


def test_auto_over_steps_past_the_tracker_passes_before_torch(tmp_path):
    run = run_with_steps(tmp_path, 2, 4, 6)
    step_saving.write_tracker(run, 2)
    given = [
        f"data.train_files=[{write_chat_jsonl(tmp_path / 'train.jsonl')}]",
        f"trainer.run_dir={run}",
        "checkpoint.resume=auto",
    ]
    check_config("sft", None, given)
    load_checked_config(SFTConfig, None, given)
