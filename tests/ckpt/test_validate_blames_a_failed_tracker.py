"""validate of a run dir whose tracker failed (no step number, unreadable, or a step that is
not complete) names the run dir as INVALID, not the sound step read in its place.

Was: "INVALID: RUN/global_step_2/dist_ckpt" and `--json` `checkpoint` RUN/global_step_2/
dist_ckpt with `valid: false`, although `validate RUN/global_step_2` said valid: a user who
reads the last line, or a script that reads `checkpoint` and `valid`, took the step for
damaged."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.interop_layouts import run_cli
from tests.support.paths import FIXTURES

RUN = FIXTURES / "megatron_fsdp_qwen2" / "run"  # mfsdp's layout: tracker and global_step_2
TRACKER = "latest_checkpointed_iteration.txt"


def _garbage(tracker: Path) -> None:
    tracker.write_text("abc\n")


def _missing_step(tracker: Path) -> None:
    tracker.write_text("5\n")


def _directory(tracker: Path) -> None:
    tracker.unlink()
    tracker.mkdir()


TRACKERS: dict[str, Callable[[Path], None]] = {
    "no step number": _garbage,
    "a missing step": _missing_step,
    "unreadable": _directory,
}


@pytest.fixture(params=list(TRACKERS))
def run(request, tmp_path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    TRACKERS[request.param](run / TRACKER)
    return run


def test_the_verdict_names_the_run_dir_and_the_step_as_valid(run):
    code, out, err = run_cli("ckpt", "validate", run)
    lines = out.splitlines()
    assert code == 1, out + err
    assert next(line for line in lines if line.startswith("error:")).startswith(
        f"error: {run / TRACKER}: "
    ), out
    step = run / "global_step_2" / "dist_ckpt"
    assert lines[-1].startswith(f"INVALID: {run} ({TRACKER} failed, see above); {step},"), out
    assert f"{step}, read in its place, is valid (mfsdp, step 2," in lines[-1], out


def test_the_json_marks_no_sound_step_invalid(run):
    code, out, err = run_cli("ckpt", "validate", run, "--json")
    report = json.loads(out)
    assert code == 1, out + err
    assert (report["checkpoint"], report["valid"], report["step"]) == (str(run), False, 2)
    assert f"{run / 'global_step_2' / 'dist_ckpt'}, read since" in report["note"], report
    assert f"note: {report['note']}" in err.splitlines(), err
    assert [f["where"] for f in report["findings"]] == [str(run / TRACKER)], report


def test_a_step_that_fails_too_is_named_invalid(run):
    """The step read in the tracker's place fails its own check: the verdict is the step's,
    as before (its error and the tracker's both listed)."""
    (run / "global_step_2" / "dist_ckpt" / "__0_1.distcp").unlink()
    code, out, _err = run_cli("ckpt", "validate", run)
    step = run / "global_step_2" / "dist_ckpt"
    assert code == 1 and out.splitlines()[-1].startswith(f"INVALID: {step} ("), out
    code, out, _err = run_cli("ckpt", "validate", run, "--json")
    assert (json.loads(out)["checkpoint"], json.loads(out)["valid"]) == (str(step), False)


def test_strict_counts_the_steps_warnings_against_it(run):
    """--strict fails the step on a warning of its own: then it is no sound step."""
    (run / "global_step_2" / "notes.txt").write_text("mine\n")
    assert run_cli("ckpt", "validate", run)[1].splitlines()[-1].startswith(f"INVALID: {run} (")
    code, out, _err = run_cli("ckpt", "validate", run, "--strict")
    assert code == 1 and out.splitlines()[-1].startswith(f"INVALID: {run / 'global_step_2'}")
