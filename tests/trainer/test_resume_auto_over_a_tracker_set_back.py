"""`checkpoint.resume=auto` on a run dir whose tracker was set back (verl's way to roll
back) over its steps 4 and 6: the run replaced step 4 with one of another history and kept
step 6 of the old one beside it, without a line, though `checkpoint.resume=RUN/global_step_2`
was refused for the same rollback. More than one complete step past the tracker is no save
of a run stopped once (a run's saves wait for the one before to commit): refused in the
rollback's words, naming the step that continues them. One step past it (a save stopped
before the tracker's update, `test_resume_over_newer_steps`) is trained over, and named."""

from __future__ import annotations

import shutil

import pytest

from mfsdp_ckpt.errors import EXIT_USAGE
from mfsdp_ckpt.format import checkpoint_resolution, layout, run_steps, step_saving
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.resume import NewerStepsError, trained_over_note
from trainer.sft import run_sft

SETTINGS = (
    "data.global_batch_size=8",
    "data.max_tokens_per_micro_batch=256",
    "checkpoint.save_every=2",
)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A run that saved steps 2, 4 and 6, and its data."""
    root = tmp_path_factory.mktemp("set_back")
    data = write_chat_jsonl(root / "train.jsonl", rows=16)
    run_sft(tiny_config(data, root / "run", *SETTINGS, "trainer.total_steps=6"))
    assert run_steps.list_complete_steps(root / "run") == [2, 4, 6]
    return data, root / "run"


def _set_back(saved, tmp_path):
    """A copy of the run whose tracker names step 2."""
    run = shutil.copytree(saved[1], tmp_path / "run")
    step_saving.write_tracker(run, 2)
    return run


def _manifests(run) -> dict[int, bytes]:
    return {
        n: (layout.step_dir(run, n) / layout.MANIFEST_FILE).read_bytes()
        for n in run_steps.list_complete_steps(run)
    }


def test_auto_over_steps_past_a_tracker_set_back_is_refused(saved, tmp_path):
    data, _ = saved
    run = _set_back(saved, tmp_path)
    before = _manifests(run)
    with pytest.raises(NewerStepsError) as refused:
        run_sft(tiny_config(data, run, *SETTINGS, "trainer.total_steps=6", "optim.lr=1e-3"))
    assert str(refused.value) == (
        f"{run}: holds its own steps after step 2 (up to {run / 'global_step_6'}), the step"
        f" {run / layout.TRACKER_FILE} names, set back past them; resuming"
        f" {run / 'global_step_2'} into it trains them again and saves over them: give"
        f" checkpoint.resume={run / 'global_step_6'} to continue from step 6, or another"
        " trainer.run_dir (to train again from step 2 here, move global_step_4 and"
        " global_step_6 away first)"
    )
    assert refused.value.exit_code == EXIT_USAGE
    assert _manifests(run) == before
    assert not (run / "config.until_step_2.yaml").exists()


def test_the_advised_step_continues_the_run(saved, tmp_path):
    data, _ = saved
    run = _set_back(saved, tmp_path)
    newest = f"checkpoint.resume={run / 'global_step_6'}"
    assert (
        run_sft(tiny_config(data, run, *SETTINGS, "trainer.total_steps=8", newest)).resumed_from
        == 6
    )
    assert run_steps.resume_step(run) == 8


def test_one_step_past_the_tracker_is_named_as_trained_over(saved, tmp_path):
    run = _set_back(saved, tmp_path)
    shutil.rmtree(run / "global_step_6")
    resumed = checkpoint_resolution.resolve_checkpoint(run)
    assert resumed.step == 2
    assert trained_over_note(run, resumed) == (
        f"{run / layout.TRACKER_FILE} names step 2, but global_step_4/ (step 4) is newer (mfsdp"
        " points the tracker at a step once it is in place: a run stopped between the two, or a"
        " tracker set back, leaves a newer step behind); resuming step 2 and training over it:"
        f" give checkpoint.resume={run / 'global_step_4'} to resume the newer one"
    )
    step_saving.write_tracker(run, 4)
    assert trained_over_note(run, checkpoint_resolution.resolve_checkpoint(run)) is None


def test_the_run_says_which_step_it_trains_over(saved, tmp_path, capsys):
    data, _ = saved
    run = _set_back(saved, tmp_path)
    shutil.rmtree(run / "global_step_6")
    capsys.readouterr()
    run_sft(tiny_config(data, run, *SETTINGS, "trainer.total_steps=6", "trainer.stop_at_step=4"))
    said = capsys.readouterr().err
    assert (
        f"[sft] {run / layout.TRACKER_FILE} names step 2, but global_step_4/ (step 4) is newer"
    ) in said, said
    assert run_steps.resume_step(run) == 4
