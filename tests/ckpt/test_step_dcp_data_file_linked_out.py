"""A step whose DCP dir keeps its `.metadata` and rank 0's first data file while another
data file (`__1_0.distcp`, ...) links out of it is no step to give.

Reading such a step is refused ("resolves outside": the reader refuses every file
`.metadata` names that leads out), yet every list of the run's steps counted it complete:
the newer-steps note, the step lists and `checkpoint.resume=auto` offered it, since only
`.metadata` and `__0_0.distcp` were looked at. Telling it costs one listing per DCP dir,
never a look outside the run.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from mfsdp_ckpt.format import layout, run_steps
from mfsdp_ckpt.format.checkpoint_resolution import checkpoint_to_resume
from tests.support.interop_layouts import run_cli
from tests.support.paths import FIXTURES

LINKED = " (a part of it links out of the step)"
LINKED_OUT = run_steps.LINKED_OUT
_LISTED: list[str] | None = None  # the dirs listed and `.metadata` files read while recording


def _record_listing(event: str, args: tuple) -> None:
    """Records each dir listed, and each `.metadata` opened (read), while recording."""
    if _LISTED is None or not args:
        return
    where = args[0]
    if event in ("os.listdir", "os.scandir"):
        _LISTED.append(os.path.abspath(os.fsdecode(where)) if isinstance(where, str) else "")
    elif event == "open" and isinstance(where, (str, bytes)):
        opened = os.fsdecode(where)
        _LISTED.extend([opened] if opened.endswith(layout.DCP_METADATA_FILE) else [])


sys.addaudithook(_record_listing)  # an audit hook stays for the process: idle unless recording


def _listed_while(call) -> tuple[object, list[str]]:
    """`call()`'s result and the directories it listed, by absolute path."""
    global _LISTED
    _LISTED = []
    try:
        return call(), _LISTED
    finally:
        _LISTED = None


def _link_out_file(part: Path, outside: Path) -> None:
    """Move the file `part` to `outside` (a dir, made here) and leave a link to it."""
    outside.mkdir(exist_ok=True)
    part.rename(outside / part.name)
    part.symlink_to(outside / part.name)


def _ours(tmp_path: Path, linked: str) -> Path:
    """mfsdp's run: global_step_1, 2 and 3 (the fixture's step), step 3's `linked` data file
    moved out of the run and linked back; no tracker."""
    run = tmp_path / "run"
    for step in (1, 2, 3):
        shutil.copytree(
            FIXTURES / "megatron_fsdp_qwen2" / "run" / "global_step_2", run / f"global_step_{step}"
        )
    _link_out_file(run / "global_step_3" / layout.DIST_CKPT_DIR / linked, tmp_path / "outside")
    return run


@pytest.mark.parametrize("linked", ["__1_0.distcp", "__0_3.distcp"])
def test_our_step_is_never_offered(linked, tmp_path):
    """Was: listed complete, resumed ("resolves outside" once read) and read by validate."""
    run = _ours(tmp_path, linked)
    part = run / "global_step_3" / layout.DIST_CKPT_DIR / linked
    assert run_steps.list_complete_steps(run) == [1, 2]
    assert run_steps.linked_out_part(run / "global_step_3") == part
    assert run_steps.step_states(run, ["global_step_3"]) == {"global_step_3": LINKED_OUT}
    with pytest.raises(layout.DamagedRunDirError) as caught:
        checkpoint_to_resume(run, "auto")
    assert f"has dist_ckpt/{linked} linking out of it" in str(caught.value)
    code, out, err = run_cli("ckpt", "validate", run)
    assert code == 0, out + err
    assert "reading global_step_2, the newest complete step" in err, err
    assert f"global_step_3{LINKED}" in err, err


def test_the_reader_refuses_what_the_list_leaves_out(tmp_path):
    """The step left out is the one reading refuses: the list and the reader agree."""
    run = _ours(tmp_path, "__1_0.distcp")
    code, out, err = run_cli("ckpt", "validate", run / "global_step_3")
    assert code == 1, out + err
    assert "dist_ckpt/__1_0.distcp: symlink points outside" in out + err, out + err


def test_a_data_file_reached_through_a_link_inside_the_step(tmp_path):
    """dist_ckpt/ a link to a dir inside the step, one of whose data files links out."""
    run = _ours(tmp_path, "__1_1.distcp")
    step = run / "global_step_3"
    (step / layout.DIST_CKPT_DIR).rename(step / "kept")
    (step / layout.DIST_CKPT_DIR).symlink_to("kept")
    assert run_steps.linked_out_part(step) == step / layout.DIST_CKPT_DIR / "__1_1.distcp"
    assert run_steps.list_complete_steps(run) == [1, 2]


def test_a_megatron_step_with_a_data_file_linked_out(tmp_path):
    """Megatron's iter_N/ holds its DCP files itself: one data file linked out marks it."""
    step = tmp_path / "run" / f"{layout.MEGATRON_ITER_PREFIX}0000010"
    shutil.copytree(FIXTURES / "megatron_fsdp_qwen2" / "run" / "global_step_2" / "dist_ckpt", step)
    _link_out_file(step / "__1_3.distcp", tmp_path / "outside")
    assert run_steps.step_states(step.parent, [step.name]) == {step.name: LINKED_OUT}
    assert run_steps.linked_out_part(step) == step / "__1_3.distcp"


def test_a_note_linked_into_the_dcp_dir_counts_for_nothing(tmp_path):
    """An entry no reader opens (not a data file) links out: the step stays complete."""
    run = _ours(tmp_path, "__1_0.distcp")
    dcp = run / "global_step_3" / layout.DIST_CKPT_DIR
    (dcp / "__1_0.distcp").unlink()
    shutil.move(tmp_path / "outside" / "__1_0.distcp", dcp / "__1_0.distcp")
    (tmp_path / "notes.txt").write_text("see the wiki\n")
    (dcp / "notes.txt").symlink_to(tmp_path / "notes.txt")
    assert run_steps.list_complete_steps(run) == [1, 2, 3]


def test_a_data_file_linked_beside_dist_ckpt_inside_the_step(tmp_path):
    """Our reader bounds data files by `dist_ckpt/`, not the step: a data file linked to a
    dir beside it in the same step was listed complete, resumed, and refused when read."""
    run = _ours(tmp_path, "__1_0.distcp")
    step = run / "global_step_3"
    moved = step / "blobs"
    part = step / layout.DIST_CKPT_DIR / "__1_3.distcp"
    moved.mkdir()
    part.rename(moved / part.name)
    part.symlink_to(Path("..") / "blobs" / part.name)
    (part.parent / "__1_0.distcp").unlink()  # only the link inside the step is left
    shutil.move(tmp_path / "outside" / "__1_0.distcp", part.parent / "__1_0.distcp")
    assert run_steps.linked_out_part(step) == part
    assert run_steps.list_complete_steps(run) == [1, 2]
    with pytest.raises(layout.DamagedRunDirError, match=r"has dist_ckpt/__1_3\.distcp linking out"):
        checkpoint_to_resume(run, "auto")
    code, out, err = run_cli("ckpt", "validate", step)
    assert code == 1, out + err
    assert "dist_ckpt/__1_3.distcp: symlink points outside" in out + err, out + err


def test_a_data_file_linked_to_a_dir_inside_dist_ckpt_is_read(tmp_path):
    """A link that stays in `dist_ckpt/` is one the reader follows: the step stays."""
    run = _ours(tmp_path, "__1_0.distcp")
    dcp = run / "global_step_3" / layout.DIST_CKPT_DIR
    (dcp / "__1_0.distcp").unlink()
    (dcp / "kept").mkdir()
    shutil.move(tmp_path / "outside" / "__1_0.distcp", dcp / "kept" / "__1_0.distcp")
    (dcp / "__1_0.distcp").symlink_to(Path("kept") / "__1_0.distcp")
    assert run_steps.list_complete_steps(run) == [1, 2, 3]
    _, out, err = run_cli("ckpt", "validate", run / "global_step_3")
    assert "symlink points outside" not in out + err, out + err  # (the fixture is step 2's)


@pytest.mark.parametrize("leftover", ["old_rank9.distcp", "__9_0.distcp"])
def test_a_data_file_metadata_never_names_counts_for_nothing(leftover, tmp_path):
    """A linked-out entry named like a data file that `.metadata` never names (an old rank's
    leftover) is never opened by the reader: it hid a step that validates and exports."""
    run = _ours(tmp_path, "__1_0.distcp")
    dcp = run / "global_step_3" / layout.DIST_CKPT_DIR
    (dcp / "__1_0.distcp").unlink()
    shutil.move(tmp_path / "outside" / "__1_0.distcp", dcp / "__1_0.distcp")
    (dcp / leftover).symlink_to(tmp_path / "outside")
    assert run_steps.linked_out_part(run / "global_step_3") is None
    assert run_steps.list_complete_steps(run) == [1, 2, 3]
    assert checkpoint_to_resume(run, "auto").step_dir == run / "global_step_3"
    _, out, err = run_cli("ckpt", "validate", run)
    assert "reading global_step_3, the newest complete step" in err, err
    assert LINKED not in err and "symlink points outside" not in out + err, out + err


STEPS = 50


def _counted(real, count: list[int]):
    """`real` (a stat call), adding each call to `count`'s one item."""

    def counted(*args, **kwargs):
        count[0] += 1
        return real(*args, **kwargs)

    return counted


def test_listing_a_run_of_many_steps_lists_each_dcp_dir_once(tmp_path, monkeypatch):
    """Listing a run's complete steps lists each step's DCP dir once and nothing else under
    the run, with a few stat calls per step and no `.metadata` read (none of its entries
    links out): nothing of a step is walked but its links. A resume lists the steps once
    more."""
    run = tmp_path / "run"
    for step in range(1, STEPS + 1):
        dist_ckpt = run / f"global_step_{step}" / layout.DIST_CKPT_DIR
        dist_ckpt.mkdir(parents=True)
        (dist_ckpt.parent / layout.MANIFEST_FILE).write_text("{}")
        names = [f"__{rank}_{index}.distcp" for rank in range(8) for index in range(4)]
        for name in (layout.DCP_METADATA_FILE, *names):
            (dist_ckpt / name).write_bytes(b"")
    stats = [0]
    for name in ("stat", "lstat"):
        monkeypatch.setattr(os, name, _counted(getattr(os, name), stats))
    steps, listed = _listed_while(lambda: run_steps.list_complete_steps(run))
    assert steps == list(range(1, STEPS + 1))
    dcp_dirs = [str(run / f"global_step_{s}" / layout.DIST_CKPT_DIR) for s in steps]
    assert sorted(path for path in listed if path != str(run)) == sorted(dcp_dirs)
    assert stats[0] <= 5 * STEPS, stats
    resumed, listed = _listed_while(lambda: run_steps.resume_step(run))
    assert resumed == STEPS
    assert sorted(path for path in listed if path != str(run)) == sorted(dcp_dirs)
    assert stats[0] <= 2 * 5 * STEPS, stats
