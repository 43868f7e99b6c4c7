"""A run dir read otherwise than its own trainer would load it says so in one note, which
inspect, validate and export-hf print and `--json` carries.

- One step dir and no tracker: Megatron-LM's --load (checkpointing.py
  `_load_base_checkpoint`), Megatron-Bridge's load and verl's resume_mode=auto
  (`find_latest_ckpt_path`) all start from scratch, not from that step. mfsdp's own run
  resumes its newest complete step without a tracker: no note there for one step.
- A Megatron non-persistent save, RUN/non_persistent/iter_N with a tracker of its own,
  whose step is at least the run's tracked one: a load with --non-persistent-ckpt-type
  global takes it instead.

Were: both read silently, "valid" for a run its trainer would train from random weights.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.format import checkpoint_resolution, layout
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import BUILDERS, run_cli
from tests.support.megatron_checkpoints import bridge_run, train_state
from tests.support.paths import FIXTURES

TRACKER = "latest_checkpointed_iteration.txt"
LOADERS = {
    "megatron-lm": "Megatron-LM's --load {run}",
    "verl-rl-v1": "verl's resume from {run} (resume_mode=auto)",
    "verl-rl-v2": "verl's resume from {run} (resume_mode=auto)",
    "verl-sft": "verl's resume from {run} (resume_mode=auto)",
    "verl-sft-v2": "verl's resume from {run} (resume_mode=auto)",
}


def _validated_note(given: Path) -> str | None:
    code, out, err = run_cli("ckpt", "validate", given, "--json")
    assert code == 0, out + err
    return json.loads(out)["note"]


def _step_dir_of_run(run: Path) -> Path:
    (step,) = (p for p in run.iterdir() if p.is_dir())
    return step


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_one_step_and_no_tracker_names_the_loader_that_starts_from_scratch(
    kind, made_optim, tmp_path
):
    run = BUILDERS[kind](made_optim, tmp_path).run
    (run / TRACKER).unlink()
    step = _step_dir_of_run(run)
    said = (
        f"{run} has no {TRACKER}: {LOADERS[kind].format(run=run)} would start from scratch;"
        f" reading {step.name}"
    )
    paths = checkpoint_resolution.resolve_checkpoint(run)
    assert (paths.kind, paths.note, paths.run_dir) == (kind, said, run)
    assert _validated_note(run) == said
    code, out, err = run_cli("ckpt", "inspect", run, "--json")
    assert code == 0 and json.loads(out)["note"] == said, err
    assert f"note: {said}" in err.splitlines()


def test_a_bridge_run_without_either_tracker_names_both(tmp_path):
    run = bridge_run(tmp_path, tiny_causal_lm("qwen2", vocab=500), steps=(10,), rows=512)
    (run / TRACKER).unlink()
    (run / layout.BRIDGE_TRACKER_FILE).unlink()
    said = (
        f"{run} has no {layout.BRIDGE_TRACKER_FILE} or {TRACKER}: Megatron-Bridge's load from"
        f" {run} would start from scratch; reading iter_0000010"
    )
    assert checkpoint_resolution.resolve_checkpoint(run).note == said
    assert _validated_note(run) == said


def test_a_tracked_run_gets_no_such_note(made_optim, tmp_path):
    run = BUILDERS["megatron-lm"](made_optim, tmp_path).run
    assert checkpoint_resolution.resolve_checkpoint(run).note is None
    assert _validated_note(run) is None


@pytest.mark.parametrize("manifest", ["kept", "damaged"])
def test_mfsdps_own_run_without_a_tracker_gets_no_note(manifest, tmp_path):
    """mfsdp's resume takes the newest complete step when no tracker was written, so its
    own run of one step is read as it resumes, with nothing to choose among to say
    (several: tests/ckpt/test_run_dir_trackers_said.py); a step whose manifest is damaged
    is still ours."""
    run = shutil.copytree(FIXTURES / "megatron_fsdp_qwen2" / "run", tmp_path / "run")
    (run / TRACKER).unlink()
    step = run / "global_step_2"
    if manifest == "damaged":
        (step / layout.MANIFEST_FILE).unlink()
        (step / layout.MANIFEST_FILE).mkdir()
    paths = checkpoint_resolution.resolve_checkpoint(run)
    assert (paths.kind, paths.step, paths.note) == (layout.MFSDP, 2, None)
    if manifest == "kept":
        assert _validated_note(run) is None


def _megatron_lm_run(made_optim: Path, tmp_path: Path) -> tuple[Path, Path]:
    laid = BUILDERS["megatron-lm"](made_optim, tmp_path)
    return laid.run, laid.levels["step"]


def _non_persistent(run: Path, step_dir: Path, step: int, tracker: str = TRACKER) -> Path:
    """A global non-persistent save of `step` as Megatron-LM writes it (a copy of
    `step_dir`), with its tracker; `tracker` the Bridge's names it in a train state."""
    directory = run / "non_persistent"
    save = shutil.copytree(step_dir, directory / f"iter_{step:07d}")
    if tracker == TRACKER:
        (directory / TRACKER).write_text(str(step))
    else:
        torch.save(train_state(step), directory / tracker)
    return save


@pytest.mark.parametrize("later", [0, 5])
def test_a_non_persistent_save_at_least_the_tracked_step_is_named(later, made_optim, tmp_path):
    run, step_dir = _megatron_lm_run(made_optim, tmp_path)
    tracked = layout.iter_step(step_dir.name)
    assert tracked is not None
    save = _non_persistent(run, step_dir, tracked + later)
    said = (
        f"{run / 'non_persistent' / TRACKER} names step {tracked + later}: Megatron-LM's load"
        " with --non-persistent-ckpt-type global would take that non-persistent save"
        f" instead; reading {step_dir.name}: give {save} to read it"
    )
    paths = checkpoint_resolution.resolve_checkpoint(run)
    assert (paths.dist_ckpt, paths.note) == (step_dir, said)
    assert _validated_note(run) == said


def test_an_older_non_persistent_save_is_not_named(made_optim, tmp_path):
    """Megatron-LM loads the tracked step then, as mfsdp reads it."""
    run, step_dir = _megatron_lm_run(made_optim, tmp_path)
    tracked = layout.iter_step(step_dir.name)
    assert tracked is not None
    _non_persistent(run, step_dir, tracked - 1)
    assert checkpoint_resolution.resolve_checkpoint(run).note is None


def test_a_non_persistent_tracker_naming_a_missing_save_is_named(made_optim, tmp_path):
    run, step_dir = _megatron_lm_run(made_optim, tmp_path)
    shutil.rmtree(_non_persistent(run, step_dir, 900))
    said = (
        f"{run / 'non_persistent' / TRACKER} names step 900, but"
        f" {run / 'non_persistent' / 'iter_0000900'} is missing: Megatron-LM's load with"
        f" --non-persistent-ckpt-type global would fail on it; reading {step_dir.name}"
    )
    assert checkpoint_resolution.resolve_checkpoint(run).note == said


def test_an_untracked_run_with_a_non_persistent_save_gets_both_notes(made_optim, tmp_path):
    """Without a tracker Megatron-LM's plain --load starts from scratch, and one with
    --non-persistent-ckpt-type global takes the non-persistent save (-1 is below any)."""
    run, step_dir = _megatron_lm_run(made_optim, tmp_path)
    (run / TRACKER).unlink()
    save = _non_persistent(run, step_dir, 1)
    note = checkpoint_resolution.resolve_checkpoint(run).note
    assert note == (
        f"{run} has no {TRACKER}: Megatron-LM's --load {run} would start from scratch;"
        f" reading {step_dir.name}; {run / 'non_persistent' / TRACKER} names step 1:"
        " Megatron-LM's load with --non-persistent-ckpt-type global would take that"
        f" non-persistent save instead; reading {step_dir.name}: give {save} to read it"
    )


def test_a_bridge_non_persistent_save_is_named_by_its_train_state(tmp_path):
    run = bridge_run(tmp_path, tiny_causal_lm("qwen2", vocab=500), steps=(10, 20), rows=512)
    save = _non_persistent(run, run / "iter_0000020", 25, layout.BRIDGE_TRACKER_FILE)
    note = checkpoint_resolution.resolve_checkpoint(run).note
    assert note == (
        f"{run / 'non_persistent' / layout.BRIDGE_TRACKER_FILE} names step 25:"
        " Megatron-Bridge's load with --non-persistent-ckpt-type global would take that"
        f" non-persistent save instead; reading iter_0000020: give {save} to read it"
    )


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("release", "names 'release', which Megatron-LM's load refuses there"),
        ("latest", "expected a step number, found 'latest'"),
    ],
)
def test_a_non_persistent_tracker_naming_no_step_is_named(text, said, made_optim, tmp_path):
    """Megatron-LM's load with the flag stops on it (a release is refused there, other
    text exits): the note says so, and the run's tracked step is read as before."""
    run, step_dir = _megatron_lm_run(made_optim, tmp_path)
    _non_persistent(run, step_dir, 900)
    (run / "non_persistent" / TRACKER).write_text(text)
    paths = checkpoint_resolution.resolve_checkpoint(run)
    assert paths.dist_ckpt == step_dir
    assert paths.note is not None and paths.note.startswith(
        f"{run / 'non_persistent' / TRACKER}: {said}"
    )
