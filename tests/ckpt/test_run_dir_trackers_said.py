"""What a run dir's trackers name, and which step is read for it, is said in one line.

- Megatron-Bridge writes latest_train_state.pt and then latest_checkpointed_iteration.txt;
  its load reads the .pt whenever it is there (checkpointing.py
  `_get_checkpoint_iteration`). When the two name different steps, the .pt's is read, as
  Bridge resumes, and a note names both files and both steps; a refusal of the .pt's step
  names the .txt's too.
- A tracker of mfsdp's naming no complete step: the refusal says what is there (missing, a
  file, a dir without its manifest).
- Several step dirs and no tracker: mfsdp's own run is read at its newest complete step,
  with a note naming the run, the missing tracker, the step read, the others and what
  `checkpoint.resume=auto` does (resumes it, or refuses in resume's own words); another
  trainer's is refused naming its own tracker (Bridge's two, whichever of its step dirs
  is unfinished) and why none is taken (its load would start from scratch).
- Every list of a run's step dirs marks what one place (`run_steps.step_states`) finds
  unfinished or empty as a save that did not finish, never offered.

Were: a Bridge run whose trackers disagreed was read at the .pt's step with no word of the
.txt; an mfsdp run without its tracker was read at its newest step silently; a Bridge run
without trackers was refused as missing latest_checkpointed_iteration.txt alone; a tracked
step of ours missing or stopped was "missing or incomplete" alike.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.format import checkpoint_resolution, layout, run_steps
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import bridge_run, train_state

TXT = layout.TRACKER_FILE
PT = layout.BRIDGE_TRACKER_FILE


@pytest.fixture(scope="module")
def bridge(tmp_path_factory) -> Path:
    """A Megatron-Bridge run with iter_0000010/ and iter_0000020/, both trackers at 20."""
    model = tiny_causal_lm("qwen2", vocab=500)
    return bridge_run(tmp_path_factory.mktemp("bridge"), model, steps=(10, 20), rows=512)


@pytest.fixture(scope="module")
def ours(tmp_path_factory) -> Path:
    """An mfsdp run with complete steps 1 and 2 and its tracker at 2."""
    run = tmp_path_factory.mktemp("ours") / "run"
    saver = Checkpointer(run, strategy="none")
    for step in (1, 2):
        saver.save(step, {"model": {"w": torch.ones(2)}}, contents=("model",))
    return run


def _copy(run: Path, tmp_path: Path) -> Path:
    return shutil.copytree(run, tmp_path / run.name, symlinks=True)


def _bridge_trackers(run: Path, pt: int | None, txt: str | None) -> Path:
    for name in (PT, TXT):
        (run / name).unlink(missing_ok=True)
    if pt is not None:
        torch.save(train_state(pt), run / PT)
    if txt is not None:
        (run / TXT).write_text(txt)
    return run


def _said_by_every_command(run: Path, note: str, tmp_path: Path) -> None:
    """validate (--json's `note` too), inspect and export-hf each say `note`."""
    code, out, err = run_cli("ckpt", "validate", run, "--json")
    assert code == 0 and json.loads(out)["note"].startswith(note), out + err
    for args in (["inspect"], ["export-hf", "--out", tmp_path / "hf"]):
        code, out, err = run_cli("ckpt", args[0], run, *args[1:])
        assert code == 0 and f"note: {note}" in err.splitlines()[0], (args, out + err)


def test_bridge_trackers_naming_two_steps_read_the_train_states_and_name_both(bridge, tmp_path):
    run = _bridge_trackers(_copy(bridge, tmp_path), pt=20, txt="10")
    paths = checkpoint_resolution.resolve_checkpoint(run)
    note = (
        f"{run / PT} names step 20, but {run / TXT} names step 10: reading step 20, the one"
        f" Megatron-Bridge's load resumes (it reads {PT} first, the .txt only without it;"
        f" Megatron-LM's --load reads the .txt): give {run / 'iter_0000010'} to read that one"
    )
    assert (paths.step_dir, paths.note) == (run / "iter_0000020", note)
    _said_by_every_command(run, note, tmp_path)


def test_a_txt_past_the_train_state_is_named_beside_the_newer_step(bridge, tmp_path):
    run = _bridge_trackers(_copy(bridge, tmp_path), pt=10, txt="20")
    paths = checkpoint_resolution.resolve_checkpoint(run)
    assert paths.step_dir == run / "iter_0000010", paths
    assert f"{run / PT} names step 10, but {run / TXT} names step 20: reading step 10" in (
        paths.note or ""
    ), paths.note


@pytest.mark.parametrize(
    ("txt", "said"),
    [("release", "names 'release'"), ("latest", "expected a step number, found 'latest'")],
)
def test_a_txt_of_no_step_is_said_and_left_unread(bridge, tmp_path, txt, said):
    run = _bridge_trackers(_copy(bridge, tmp_path), pt=20, txt=txt)
    paths = checkpoint_resolution.resolve_checkpoint(run)
    assert paths.step_dir == run / "iter_0000020" and said in (paths.note or ""), paths.note
    assert "reading step 20" in (paths.note or ""), paths.note


def test_agreeing_or_absent_txt_adds_nothing(bridge, tmp_path):
    run = _bridge_trackers(_copy(bridge, tmp_path), pt=20, txt="0020")
    assert checkpoint_resolution.resolve_checkpoint(run).note is None
    _bridge_trackers(run, pt=20, txt=None)
    assert checkpoint_resolution.resolve_checkpoint(run).note is None


def test_a_train_state_naming_a_missing_step_is_refused_naming_the_txts(bridge, tmp_path):
    run = _bridge_trackers(_copy(bridge, tmp_path), pt=30, txt="20")
    code, out, err = run_cli("ckpt", "validate", run)
    line = one_error_line(out)  # validate's finding: an invalid checkpoint
    assert code == 1 and line.startswith(f"error: {run / PT}: names step '30'"), out + err
    assert line.endswith(
        f" ({run / TXT} names step 20, which Megatron-Bridge's load reads only without {PT})"
    ), line


def test_a_damaged_train_state_is_refused_naming_the_txts(bridge, tmp_path):
    run = _bridge_trackers(_copy(bridge, tmp_path), pt=None, txt="20")
    (run / PT).write_bytes(b"not a pickle")
    with pytest.raises(layout.DamagedRunDirError) as caught:
        checkpoint_resolution.resolve_checkpoint(run)
    assert str(caught.value).startswith(str(run / PT)), caught.value
    assert f"({run / TXT} names step 20," in str(caught.value), caught.value


def test_a_bridge_run_of_steps_without_trackers_names_both_and_why(bridge, tmp_path):
    run = _bridge_trackers(_copy(bridge, tmp_path), pt=None, txt=None)
    code, out, err = run_cli("ckpt", "inspect", run)
    assert code == 2, out + err
    assert one_error_line(err) == (
        f"error: {run}: 2 step dirs and no {PT} or {TXT}; give one of them (iter_0000010,"
        f" iter_0000020): none is taken, as Megatron-Bridge's load from {run} would start"
        " from scratch"
    )


def test_our_run_of_steps_without_its_tracker_says_which_it_reads(ours, tmp_path):
    run = _copy(ours, tmp_path)
    (run / TXT).unlink()
    (run / "global_step_0" / "dist_ckpt").mkdir(parents=True)  # an older save stopped early
    note = (
        f"{run} has no {TXT}: reading global_step_2, the newest complete step, the one"
        " checkpoint.resume=auto resumes without it; other step dirs here: global_step_0"
        " (a save that did not finish), global_step_1"
    )
    assert run_steps.resume_step(run) == 2
    paths = checkpoint_resolution.resolve_checkpoint(run)
    assert (paths.kind, paths.step, paths.note) == (layout.MFSDP, 2, note)
    for command in ("validate", "inspect"):
        code, out, err = run_cli("ckpt", command, run)
        assert code == 0 and err.splitlines()[0] == f"note: {note}", out + err


_NEWER_NOT_A_STEP = {
    "a save stopped early": lambda step: (step / "dist_ckpt").mkdir(parents=True),
    "an empty dir": lambda step: step.mkdir(),
    "a file": lambda step: step.write_text("x"),
}


def _resume_refusal(run: Path) -> str:
    """What `checkpoint.resume=auto` (`run_steps.resume_step`) says refusing `run`."""
    with pytest.raises(layout.DamagedRunDirError) as caught:
        run_steps.resume_step(run)
    return str(caught.value)


@pytest.mark.parametrize("newer", sorted(_NEWER_NOT_A_STEP))
@pytest.mark.parametrize("tracked", [False, True])
def test_our_run_read_says_what_resume_does_with_it(ours, tmp_path, newer, tracked):
    """Was "the one checkpoint.resume=auto resumes" of global_step_2 while resume refused
    until global_step_3 was moved away (and, tracked, nothing): the note is resume's own."""
    run = _copy(ours, tmp_path)
    if not tracked:
        (run / TXT).unlink()
    _NEWER_NOT_A_STEP[newer](run / "global_step_3")
    refusal = _resume_refusal(run)
    assert refusal.startswith(f"{run / 'global_step_3'} ") and "move it away" in refusal
    said = f"checkpoint.resume=auto refuses this run dir: {refusal}"
    paths = checkpoint_resolution.resolve_checkpoint(run)
    assert (paths.step, paths.note.endswith(f"; {said}" if not tracked else said)) == (2, True)
    assert "the one checkpoint.resume=auto resumes" not in paths.note, paths.note
    code, out, err = run_cli("ckpt", "inspect", run)
    assert code == 0 and f"note: {paths.note}" in err.splitlines(), out + err


# what each unfinished newest save is said to lack
WHY = {
    "a .distcp alone": f"holds no {layout.DCP_METADATA_FILE}, which a save writes last",
    "nothing": "is empty",
}


@pytest.mark.parametrize("newest", list(WHY))
def test_a_bridge_run_without_trackers_says_its_unfinished_newest_save(bridge, tmp_path, newest):
    """Was: Megatron-LM's tracker and load named when the newest iter_N/ was a save that did
    not finish (asked alone whose run it is), and an empty one offered as a step to give."""
    run = _bridge_trackers(_copy(bridge, tmp_path), pt=None, txt=None)
    (run / "iter_0000030").mkdir()
    if newest != "nothing":
        shutil.copy(next((run / "iter_0000020").glob("*.distcp")), run / "iter_0000030")
    code, out, err = run_cli("ckpt", "inspect", run)
    assert code == 2, out + err
    assert one_error_line(err) == (
        f"error: {run}: 3 step dirs and no {PT} or {TXT}; give one of them (iter_0000010,"
        f" iter_0000020 (the newest complete one); {run / 'iter_0000030'} is a save that did"
        f" not finish (it {WHY[newest]})): none is taken, as Megatron-Bridge's load from {run}"
        " would start from scratch"
    )
    code, out, err = run_cli("ckpt", "inspect", run / "iter_0000030")
    assert code == 1 and "did not finish" in one_error_line(err), out + err


def test_every_list_of_step_dirs_marks_what_one_place_decides(ours, tmp_path):
    """An empty step dir was marked in some lists (a tracked step's, mfsdp's note) and
    offered in others (`steps_here`, a refusal to choose): each asks `step_states`."""
    run = _copy(ours, tmp_path)
    (run / "global_step_3" / "dist_ckpt").mkdir(parents=True)
    (run / "global_step_4").mkdir()
    (run / "global_step_5").write_text("x")
    names = ["global_step_1", "global_step_2", "global_step_3", "global_step_4"]
    states = run_steps.step_states(run, [*names, "global_step_5", TXT])
    assert states == {
        "global_step_1": run_steps.COMPLETE,
        "global_step_2": run_steps.COMPLETE,
        "global_step_3": run_steps.UNFINISHED,
        "global_step_4": run_steps.EMPTY,
        "global_step_5": run_steps.NOT_A_STEP,
        TXT: run_steps.NOT_A_STEP,
    }
    mark = run_steps.UNFINISHED_MARK
    assert run_steps.steps_here(run) == (
        f" (step dirs here: global_step_1, global_step_2, global_step_3{mark}, global_step_4{mark})"
    )


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda step: None, "is missing (step dirs here"),
        (lambda step: step.write_text("x"), "is a file, not a step dir (step dirs here"),
        (lambda step: (step / "dist_ckpt").mkdir(parents=True), "holds no manifest.json"),
    ],
)
def test_our_tracker_naming_no_complete_step_says_what_is_there(ours, tmp_path, make, said):
    """Was "is missing or incomplete" for each, a missing step and one stopped alike."""
    run = _copy(ours, tmp_path)
    (run / TXT).write_text("5")
    make(run / "global_step_5")
    code, out, err = run_cli("ckpt", "inspect", run)
    assert code == 1 and one_error_line(err).startswith(
        f"error: {run / TXT}: names step 5, but {run / 'global_step_5'} {said}"
    ), out + err
    assert "global_step_1, global_step_2" in err, err
