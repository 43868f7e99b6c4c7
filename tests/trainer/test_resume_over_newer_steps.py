"""A step resumed into a run dir that holds complete steps after it (was: trained them again
and saved over them without a word). Run B began from run A's step 2 and trained to its own
step 4, so B/config.yaml records `checkpoint.resume: A/global_step_2`: `--config
B/config.yaml trainer.total_steps=6` was refused with the advice to move config.yaml away,
and following it replaced B's step 4 with a retrained one. A rollback to a run dir's own
older step did the same. Both are refused (exit 2) naming the run dir's newest step and the
step resumed, before anything is loaded or written; moving the later steps away rolls back."""

from __future__ import annotations

import re
import shutil

import pytest

from mfsdp_ckpt.errors import EXIT_USAGE
from mfsdp_ckpt.format import checkpoint_resolution, layout, run_steps, step_saving
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.config import RESOLVED_CONFIG_FILE, SFTConfig, load_config
from trainer.config_history import OwnConfigError, keep_changed_config
from trainer.resume import NewerStepsError
from trainer.sft import run_sft

SETTINGS = (
    "data.global_batch_size=8",
    "data.max_tokens_per_micro_batch=256",
    "checkpoint.save_every=2",
)


@pytest.fixture
def pinned(tmp_path):
    """Run A at step 2, and run B that began from A's step 2 and saved its own step 4."""
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    base, run = tmp_path / "A", tmp_path / "B"
    run_sft(tiny_config(data, base, *SETTINGS, "trainer.total_steps=2"))
    began = f"checkpoint.resume={base / 'global_step_2'}"
    run_sft(tiny_config(data, run, *SETTINGS, "trainer.total_steps=4", began))
    assert run_steps.list_complete_steps(run) == [4]
    return data, base, run


def _from_its_config(run, *overrides: str) -> SFTConfig:
    """`--config RUN/config.yaml trainer.total_steps=6`, the way to train a run on."""
    return load_config(SFTConfig, run / RESOLVED_CONFIG_FILE, ["trainer.total_steps=6", *overrides])


def _saved(step_dir) -> bytes:
    return (step_dir / layout.MANIFEST_FILE).read_bytes()


def test_resuming_a_runs_config_that_pins_another_runs_step_is_refused(pinned):
    _, base, run = pinned
    before = _saved(run / "global_step_4")
    with pytest.raises(NewerStepsError) as refused:
        run_sft(_from_its_config(run))
    message = str(refused.value)
    assert message == (
        f"{run}: holds its own steps after step 2 (up to {run / 'global_step_4'}); resuming"
        f" {base / 'global_step_2'} into it trains them again and saves over them: give"
        f" checkpoint.resume={run / 'global_step_4'} to continue from step 4, or another"
        " trainer.run_dir (to train"
        " again from step 2 here, move global_step_4 away first)"
    )
    assert refused.value.exit_code == EXIT_USAGE
    assert _saved(run / "global_step_4") == before


def test_moving_the_config_away_still_keeps_the_run_dirs_steps(pinned):
    """What the earlier refusal advised: the run then resumed A's step 2 into B."""
    _, _, run = pinned
    before = _saved(run / "global_step_4")
    moved = run.parent / "moved_config.yaml"
    (run / RESOLVED_CONFIG_FILE).rename(moved)
    with pytest.raises(NewerStepsError, match="move global_step_4 away first"):
        run_sft(load_config(SFTConfig, moved, ["trainer.total_steps=6"]))
    assert _saved(run / "global_step_4") == before
    assert not (run / RESOLVED_CONFIG_FILE).exists()


def test_the_advised_resume_continues_the_run_dirs_own_step(pinned, capsys):
    _, _, run = pinned
    capsys.readouterr()
    run_sft(_from_its_config(run, "checkpoint.resume=auto"))
    assert f"steps 4 -> 6 (resumed from {run / 'global_step_4'})" in capsys.readouterr().err
    assert run_steps.list_complete_steps(run) == [4, 6]


def test_a_config_refused_in_a_run_dir_with_steps_says_to_continue_them(pinned):
    """`_own_config_replaced`: the config.yaml of a run dir holding its own steps is theirs,
    not one to move away."""
    _, base, run = pinned
    resumed = checkpoint_resolution.resolve_checkpoint(base / "global_step_2")
    with pytest.raises(OwnConfigError) as refused:
        keep_changed_config(run, 2, _from_its_config(run), resumed)
    message = str(refused.value)
    assert message.endswith(
        f"; it is the config of {run}'s own steps (up to {run / 'global_step_4'}), and pins"
        f" checkpoint.resume={base / 'global_step_2'}: give checkpoint.resume=auto to continue"
        " them, or another trainer.run_dir"
    )
    assert "move it away" not in message


def test_a_rollback_to_an_own_older_step_is_refused_until_later_steps_are_moved(tmp_path):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    run = tmp_path / "run"
    run_sft(tiny_config(data, run, *SETTINGS, "trainer.total_steps=4"))
    before = _saved(run / "global_step_4")
    back = f"checkpoint.resume={run / 'global_step_2'}"
    with pytest.raises(NewerStepsError) as refused:
        run_sft(tiny_config(data, run, *SETTINGS, "trainer.total_steps=4", back))
    assert str(refused.value).startswith(
        f"{run}: holds its own steps after step 2 (up to {run / 'global_step_4'}); resuming"
        f" {run / 'global_step_2'} into it"
    )
    assert _saved(run / "global_step_4") == before
    shutil.move(run / "global_step_4", tmp_path / "kept_step_4")
    run_sft(tiny_config(data, run, *SETTINGS, "trainer.total_steps=4", back))
    assert run_steps.list_complete_steps(run) == [2, 4]


def test_auto_resumes_the_trackers_step_past_an_uncommitted_newer_step(tmp_path, capsys):
    """The tracker is a save's commit point: a step dir past it is a save killed between its
    rename and the tracker's update, and `checkpoint.resume=auto` ("run the same command
    again") resumes the tracker's step and trains on over it, as the crash tests chain."""
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    run = tmp_path / "run"
    run_sft(tiny_config(data, run, *SETTINGS, "trainer.total_steps=4"))
    step_saving.write_tracker(run, 2)  # a save of step 4 killed before its tracker's update
    capsys.readouterr()
    run_sft(tiny_config(data, run, *SETTINGS, "trainer.total_steps=6"))
    assert f"steps 2 -> 6 (resumed from {run / 'global_step_2'}" in capsys.readouterr().err
    assert run_steps.resume_step(run) == 6


def test_an_incomplete_step_after_the_step_resumed_by_path_is_refused(pinned, tmp_path):
    """`checkpoint.resume=auto` refused it already; a step named by path saved over it."""
    data, base, _ = pinned
    damaged = tmp_path / "C" / "global_step_4"
    damaged.mkdir(parents=True)
    (damaged / "notes.txt").write_text("mine")
    began = f"checkpoint.resume={base / 'global_step_2'}"
    with pytest.raises(layout.DamagedRunDirError, match=re.escape(f"{damaged} holds no manifest")):
        run_sft(tiny_config(data, damaged.parent, *SETTINGS, "trainer.total_steps=4", began))
    assert sorted(p.name for p in damaged.iterdir()) == ["notes.txt"]
