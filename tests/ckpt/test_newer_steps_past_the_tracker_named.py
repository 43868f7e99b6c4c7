"""Every step dir past the one a Megatron-LM tracker names is said, with a reason true of
Megatron-LM, beside the tracked step read.

Was: only the newest was named: with a complete iter_0000200/ and an unfinished
iter_0000300/ past a tracker of 100, the note spoke of iter_0000300/ alone (a save that did
not finish), never of the complete step the user likely wants; a lone complete one was
explained as verl's ("an async save does not update the tracker"), which Megatron-LM's
does (its finalize writes the tracker); and a `release` tracker with iter_N/ dirs beside
it gave no note at all.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mfsdp_ckpt.format import checkpoint_resolution, layout
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.megatron_checkpoints import mcore_weights, megatron_args, save_dcp

MEGATRON_REASON = "Megatron-LM writes the tracker once a save is finalized"


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A complete Megatron-LM iteration dir."""
    model = tiny_causal_lm("llama", vocab=64)
    state = {"args": megatron_args(model), "iteration": 100, "model": mcore_weights(model)}
    return save_dcp(state, tmp_path_factory.mktemp("megatron") / "iter_0000100")


def _run(saved: Path, root: Path, tracked: str, complete: list[str], unfinished=()) -> Path:
    run = root / "run"
    for name in complete:
        shutil.copytree(saved, run / name)
    for name in unfinished:  # a shard written, .metadata (written last) not yet
        (run / name).mkdir(parents=True)
        shutil.copy(next(saved.glob("*.distcp")), run / name)
    (run / layout.TRACKER_FILE).write_text(tracked)
    return run


def _note(run: Path) -> str:
    return checkpoint_resolution.resolve_checkpoint(run).note or ""


def test_a_complete_step_before_an_unfinished_one_is_named_and_advised(saved, tmp_path):
    run = _run(
        saved, tmp_path, "100", ["iter_0000100", "iter_0000200"], unfinished=["iter_0000300"]
    )
    note = _note(run)
    assert note.startswith(
        f"{run / layout.TRACKER_FILE} names step 100, but 2 newer step dirs are here:"
        " iter_0000200/ (step 200), iter_0000300/ (step 300, a save that did not finish: no"
        " .metadata"
    ), note
    assert MEGATRON_REASON in note and "async" not in note, note
    assert note.endswith(
        f"reading step 100: give {run / 'iter_0000200'} to read the newest complete one"
    ), note


def test_a_lone_newer_step_gets_megatron_lms_reason(saved, tmp_path):
    run = _run(saved, tmp_path, "100", ["iter_0000100", "iter_0000200"])
    note = _note(run)
    assert "iter_0000200/ (step 200) is newer (Megatron-LM writes the tracker" in note, note
    assert "async" not in note and note.endswith("to read the newer one"), note


def test_a_release_tracker_with_iteration_dirs_beside_it_names_them(saved, tmp_path):
    run = _run(saved, tmp_path, "release", ["release", "iter_0000200"])
    note = _note(run)
    assert note.startswith(
        f"{run / layout.TRACKER_FILE} names 'release', but iter_0000200/ (step 200) is newer"
    ), note
    assert note.endswith(f"reading release/: give {run / 'iter_0000200'} to read the newer one")


def test_many_newer_steps_are_said_newest_first_and_counted(saved, tmp_path):
    newer = [f"iter_{step:07d}" for step in range(200, 1400, 100)]  # 12 newer steps
    run = _run(saved, tmp_path, "100", ["iter_0000100", *newer])
    note = _note(run)
    assert "12 newer step dirs are here: (+4 older) iter_0000600/ (step 600)," in note, note
    assert "iter_0000500/" not in note and f"give {run / 'iter_0001300'}" in note, note
