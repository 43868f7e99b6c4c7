"""`checkpoint.resume=auto` on a run dir with complete steps past its tracker: a run stopped
twice mid-save (step 6 left by the first, trained over but never reached once save_every
changed, and step 8 by the second) holds two, as a tracker set back (verl's way to roll
back) does; the dirs cannot tell which. Two were refused as a set-back (exit 2, "set back
past them"), words false for the twice-stopped run. Auto resumes the tracker's step, as verl
and Megatron-LM do, over one or many, and one note names each, with the
`checkpoint.resume` that continues the newest instead."""

from __future__ import annotations

import shutil

import pytest

from mfsdp_ckpt.format import checkpoint_resolution, layout, run_steps, step_saving
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.resume import trained_over_note
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


def test_two_steps_past_the_tracker_are_named_as_trained_over(saved, tmp_path):
    run = _set_back(saved, tmp_path)
    resumed = checkpoint_resolution.resolve_checkpoint(run)
    assert resumed.step == 2
    assert trained_over_note(run, resumed) == (
        f"{run / layout.TRACKER_FILE} names step 2, but 2 newer step dirs are here:"
        " global_step_4/ (step 4), global_step_6/ (step 6) (mfsdp points the tracker at a step"
        " once it is in place: a run stopped between the two, or a tracker set back, leaves a"
        " newer step behind); resuming step 2 and training over them (each left beside this"
        " run's steps until a save of its step replaces it): give"
        f" checkpoint.resume={run / 'global_step_6'} to resume the newest complete one"
    )


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
        " tracker set back, leaves a newer step behind); resuming step 2 and training over it"
        " (left beside this run's steps until a save of step 4 replaces it): give"
        f" checkpoint.resume={run / 'global_step_4'} to resume the newer one"
    )
    step_saving.write_tracker(run, 4)
    assert trained_over_note(run, checkpoint_resolution.resolve_checkpoint(run)) is None


def test_the_run_resumes_over_two_and_says_which_it_trains_over(saved, tmp_path, capsys):
    """The run the set-back refusal stopped: it resumes step 2, saves over step 4, leaves step
    6 beside its own, and its note names both."""
    data, _ = saved
    run = _set_back(saved, tmp_path)
    old_six = _manifests(run)[6]
    capsys.readouterr()
    result = run_sft(
        tiny_config(data, run, *SETTINGS, "trainer.total_steps=6", "trainer.stop_at_step=4")
    )
    said = capsys.readouterr().err
    assert result.resumed_from == 2
    assert (
        f"[sft] {run / layout.TRACKER_FILE} names step 2, but 2 newer step dirs are here:"
        " global_step_4/ (step 4), global_step_6/ (step 6)"
    ) in said, said
    assert "set back past them" not in said
    assert run_steps.resume_step(run) == 4
    assert _manifests(run)[6] == old_six
