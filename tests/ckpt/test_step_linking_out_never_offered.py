"""A step dir a part of which links out of it is no step to give, in every list and pick.

A step whose `dist_ckpt/` (verl's, under a role; ours) or whose DCP files (Megatron's
`iter_N/` holds them itself) link out of it is refused when read ("resolves outside"),
whatever lies at the link's target. Every list of a run's steps still counted it
complete: the newer-steps note said "give RUN/global_step_40 to read the newer one", a
run without a tracker offered it as "the newest complete one", `steps_here` and
`complete_step_dirs` listed it, and `checkpoint.resume=auto` picked it. The target here is
a valid DCP (the hostile case: nothing about it is wrong but where it is), and nothing
under it may be listed on the way.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mfsdp_ckpt.format import layout, run_steps
from mfsdp_ckpt.format.checkpoint_resolution import checkpoint_to_resume
from mfsdp_ckpt.format.foreign_run_dirs import foreign_run_words
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from tests.support.interop_layouts import megatron_lm, one_error_line, run_cli, verl_rl_v1
from tests.support.paths import FIXTURES

LINKED = " (a part of it links out of the step)"
_LISTED: list[str] | None = None  # the dirs listed (os.listdir, os.scandir) in `listings`


def _record_listing(event: str, args: tuple) -> None:
    if _LISTED is not None and event in ("os.listdir", "os.scandir") and args:
        where = args[0]
        _LISTED.append(
            os.path.abspath(os.fsdecode(where)) if isinstance(where, str | bytes) else ""
        )


sys.addaudithook(_record_listing)  # an audit hook stays for the process: idle outside `listings`


@contextlib.contextmanager
def listings() -> Iterator[list[str]]:
    """The directories listed in the block, by absolute path."""
    global _LISTED
    _LISTED = []
    try:
        yield _LISTED
    finally:
        _LISTED = None


def _under(listed: list[str], outside: Path) -> list[str]:
    return [path for path in listed if Path(path).is_relative_to(outside)]


def _link_out(part: Path, outside: Path) -> None:
    """Move `part` (a dir of a step) to `outside` and leave a link to it in its place."""
    part.rename(outside)
    part.symlink_to(outside)


def _verl_run(made_optim: Path, root: Path) -> tuple[Path, str, str]:
    """verl's RL run: global_step_10, 20 and 40, step 40's actor/dist_ckpt linked out to a
    valid DCP; the tracker names step 20. (run, linked step, older complete step)."""
    run = verl_rl_v1(made_optim, root, critic=False).run
    for step in (10, 20):
        shutil.copytree(run / "global_step_40", run / f"global_step_{step}")
    _link_out(run / "global_step_40" / "actor" / layout.DIST_CKPT_DIR, root / "outside")
    (run / layout.TRACKER_FILE).write_text("20")
    return run, "global_step_40", "global_step_20"


def _megatron_run(made_optim: Path, root: Path) -> tuple[Path, str, str]:
    """Megatron-LM's run: its iter_N and a newer iter_(N+10) whose DCP files each link to
    a valid copy outside; the tracker names step N."""
    run = megatron_lm(made_optim, root).run
    (older,) = [p for p in run.iterdir() if p.name.startswith(layout.MEGATRON_ITER_PREFIX)]
    outside = root / "outside"
    shutil.copytree(older, outside)
    newer = run / f"{layout.MEGATRON_ITER_PREFIX}{layout.iter_step(older.name) + 10:07d}"
    newer.mkdir()
    for name in os.listdir(outside):
        (newer / name).symlink_to(outside / name)
    return run, newer.name, older.name


FOREIGN = {"verl": _verl_run, "megatron": _megatron_run}


def _ours(tmp_path: Path) -> Path:
    """mfsdp's run: global_step_1, 2 and 3 (the fixture's step), step 3's dist_ckpt linked
    out to its valid DCP; no tracker."""
    run = tmp_path / "run"
    for step in (1, 2, 3):
        shutil.copytree(
            FIXTURES / "megatron_fsdp_qwen2" / "run" / "global_step_2", run / f"global_step_{step}"
        )
    _link_out(run / "global_step_3" / layout.DIST_CKPT_DIR, tmp_path / "outside")
    return run


@pytest.mark.parametrize("kind", list(FOREIGN))
def test_the_newer_steps_note_names_the_link(kind, made_optim, tmp_path):
    """Was: "... is newer (...); reading step 20: give RUN/global_step_40 to read the newer
    one", and the step given was "resolves outside"."""
    run, linked, _older = FOREIGN[kind](made_optim, tmp_path)
    config = ("--hf-config", made_optim) if kind == "megatron" else ()
    with listings() as listed:
        for command in (("validate", run), ("export-hf", run, "--out", tmp_path / "hf", *config)):
            code, out, err = run_cli("ckpt", *command)
            assert code == 0, out + err
            assert f"{linked}/ (step" in err and "linking out of it" in err, err
            assert f"give {run / linked}" not in err, err
    assert _under(listed, tmp_path / "outside") == []
    code, out, err = run_cli("ckpt", "validate", run / linked)
    assert code == 1 and "outside" in one_error_line(out + err), out + err


@pytest.mark.parametrize("kind", list(FOREIGN))
def test_a_run_without_tracker_offers_only_steps_that_read(kind, made_optim, tmp_path):
    """Was: "give one of them (global_step_10, global_step_20, global_step_40)"."""
    run, linked, older = FOREIGN[kind](made_optim, tmp_path)
    (run / layout.TRACKER_FILE).unlink()
    with listings() as listed:
        code, out, err = run_cli("ckpt", "validate", run)
    line = one_error_line(err)
    assert code == 2, out + err
    assert f"{older} (the newest complete one)" in line, line
    assert f"{run / linked} has " in line and "linking out of it" in line, line
    assert f", {linked}" not in line and f"({linked}" not in line, line
    assert _under(listed, tmp_path / "outside") == []


@pytest.mark.parametrize("kind", list(FOREIGN))
def test_train_given_the_run_dir_offers_a_step_that_reads(kind, made_optim, tmp_path):
    """`trainer.run_dir` of another trainer's run names the step to train from
    (`model.path=`): the newest that reads, never the one linking out."""
    run, _linked, older = FOREIGN[kind](made_optim, tmp_path)
    (run / layout.TRACKER_FILE).unlink()
    words = foreign_run_words(run)
    assert words is not None and f"model.path={run / older} " in words, words


@pytest.mark.parametrize("kind", list(FOREIGN))
def test_steps_here_and_complete_step_dirs_leave_it_out(kind, made_optim, tmp_path):
    """A tracker naming a missing step: `steps_here` marks the step, and validate's "complete
    step dirs here" does not offer it. Was: listed among them, unmarked."""
    run, linked, older = FOREIGN[kind](made_optim, tmp_path)
    (run / layout.TRACKER_FILE).write_text("99")
    with listings() as listed:
        assert f"{linked}{LINKED}" in run_steps.steps_here(run)
        complete = run_steps.complete_step_dirs(run)
        code, out, err = run_cli("ckpt", "validate", run)
    assert run / older in complete and run / linked not in complete, complete
    assert code == 1 and f"{linked}{LINKED}" in out + err, out + err
    assert _under(listed, tmp_path / "outside") == []


def test_our_run_reads_and_lists_around_it(tmp_path):
    """No tracker: validate and export-hf read step 2, the newest step that reads, and mark
    step 3. Was: both picked step 3 and failed, "resolves outside"."""
    run = _ours(tmp_path)
    with listings() as listed:
        assert run_steps.list_complete_steps(run) == [1, 2]
        complete = run_steps.complete_step_dirs(run)
        validated = run_cli("ckpt", "validate", run)
        exported = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    assert complete == [run / "global_step_1", run / "global_step_2"]
    for code, out, err in (validated, exported):
        assert code == 0, out + err
        assert "reading global_step_2, the newest complete step" in err, err
        assert f"global_step_3{LINKED}" in err, err
    assert _under(listed, tmp_path / "outside") == []
    (run / layout.TRACKER_FILE).write_text("99")
    assert f"global_step_3{LINKED}" in run_steps.steps_here(run)


@pytest.mark.parametrize("tracked", [None, "2"])
def test_resume_never_picks_it(tracked, tmp_path):
    """`checkpoint.resume=auto` refuses the run naming the link, as it does a save past the
    step it resumes that did not finish. Was: no tracker, step 3 picked and "resolves
    outside"; a tracker at step 2, step 3 trained over and replaced without a line."""
    run = _ours(tmp_path)
    if tracked is not None:
        (run / layout.TRACKER_FILE).write_text(tracked)
    with pytest.raises(layout.DamagedRunDirError) as caught:
        checkpoint_to_resume(run, "auto")
    said = str(caught.value)
    assert f"{run / 'global_step_3'} has dist_ckpt linking out of it" in said, said
    assert "resuming step 2, a save of step 3 replaces it: move it away" in said, said


def test_the_tracked_step_is_refused_as_reading_it_is(tmp_path):
    """A tracker naming the step: validate and a resume of the run name the link, in the
    line reading the step gives (left out of the complete steps, it was "missing or
    incomplete" to validate, which then read step 2 in its place)."""
    run = _ours(tmp_path)
    (run / layout.TRACKER_FILE).write_text("3")
    link = f"{run / 'global_step_3' / layout.DIST_CKPT_DIR}: resolves outside"
    code, out, err = run_cli("ckpt", "validate", run)
    assert code == 1 and link in one_error_line(out + err), out + err
    assert "missing or incomplete" not in out + err, out + err
    with pytest.raises(CheckpointFileError, match="resolves outside") as caught:
        checkpoint_to_resume(run, "auto")
    assert link in str(caught.value)


def test_a_run_whose_only_step_links_out_names_it(tmp_path):
    """Every step of mfsdp's run links out and no tracker: one line marking them, no
    traceback (the newest complete step was looked up in an empty list)."""
    run = _ours(tmp_path)
    for step in (1, 2):
        shutil.rmtree(run / f"global_step_{step}")
    code, out, err = run_cli("ckpt", "validate", run)
    assert code == 1 and f"global_step_3{LINKED}" in one_error_line(out + err), out + err


def test_a_step_judged_alike_whatever_lies_outside(tmp_path):
    """The step's state hangs on the link alone: a valid DCP at its target, nothing there, a
    relative link climbing out."""
    run = _ours(tmp_path)
    dist_ckpt = run / "global_step_3" / layout.DIST_CKPT_DIR
    states = []
    for target in (tmp_path / "outside", Path("/nonexistent/dcp"), Path("../../outside")):
        dist_ckpt.unlink()
        dist_ckpt.symlink_to(target)
        states.append(run_steps.step_states(run, ["global_step_3"])["global_step_3"])
    assert states == [run_steps.LINKED_OUT] * 3


def _link_in(part: Path, outside: Path) -> None:
    """A file `outside` (a note, kept elsewhere) linked in at `part` of a step."""
    outside.write_text("see the wiki\n")
    part.symlink_to(outside)


def test_a_note_linked_into_a_megatron_step_leaves_it_offered(made_optim, tmp_path):
    """A README linked into iter_N/ is never opened by a reader: the step stays the newest
    complete one. Was: marked as linking out, and the older step read as "the newest
    complete one", though validating iter_N itself said valid."""
    run, newer, older = _megatron_run(made_optim, tmp_path)
    for name in os.listdir(run / newer):
        (run / newer / name).unlink()
        shutil.copy(tmp_path / "outside" / name, run / newer / name)
    _link_in(run / newer / "README.txt", tmp_path / "README_outside.txt")
    assert run_steps.step_states(run, [newer, older]) == {
        newer: run_steps.COMPLETE,
        older: run_steps.COMPLETE,
    }
    (run / layout.TRACKER_FILE).unlink()
    code, out, err = run_cli("ckpt", "validate", run)
    assert code == 2 and f"{older}, {newer}" in one_error_line(err), out + err
    assert "linking out" not in out + err, out + err


def test_a_note_linked_into_our_dist_ckpt_leaves_the_step_resumed(tmp_path):
    """mfsdp's step whose dist_ckpt/ holds a note linked in is complete and resumed. Was:
    "checkpoint.resume=auto refuses this run dir: ... has dist_ckpt/notes.txt linking out
    of it", and validate of the run read the older step."""
    run = _ours(tmp_path)
    (run / "global_step_3" / layout.DIST_CKPT_DIR).unlink()
    shutil.copytree(tmp_path / "outside", run / "global_step_3" / layout.DIST_CKPT_DIR)
    _link_in(run / "global_step_3" / layout.DIST_CKPT_DIR / "notes.txt", tmp_path / "notes.txt")
    assert run_steps.list_complete_steps(run) == [1, 2, 3]
    assert run_steps.resume_step(run) == 3


@pytest.mark.parametrize("name", [layout.DCP_METADATA_FILE, "__0_0.distcp"])
def test_a_dcp_file_a_reader_opens_linked_out_is_never_offered(name, tmp_path):
    """The hostile case, file by file: the `.metadata` or rank 0's data file of our step's
    dist_ckpt/ links to a valid copy outside; the step is not offered."""
    run = _ours(tmp_path)
    dist_ckpt = run / "global_step_3" / layout.DIST_CKPT_DIR
    dist_ckpt.unlink()
    shutil.copytree(tmp_path / "outside", dist_ckpt)
    (dist_ckpt / name).unlink()
    (dist_ckpt / name).symlink_to(tmp_path / "outside" / name)
    assert run_steps.list_complete_steps(run) == [1, 2]
    assert run_steps.linked_out_part(run / "global_step_3") == dist_ckpt / name
