"""The line of records removed from metrics.jsonl names one step as a step: it said
"removed 1 record(s) of steps 3-3" where a resume trained step 3 again. Several steps stay
a range."""

from __future__ import annotations

import json

from trainer.metrics import METRICS_FILE, drop_steps_after


def _records(*steps: int) -> str:
    return "".join(json.dumps({"step": step, "train/loss": float(step)}) + "\n" for step in steps)


def _note(tmp_path, steps: tuple[int, ...], resumed: int) -> str | None:
    run = tmp_path / "run"
    run.mkdir()
    (run / METRICS_FILE).write_text(_records(*steps))
    return drop_steps_after(run, resumed)


def test_one_record_of_one_step(tmp_path):
    assert _note(tmp_path, (1, 2, 3), 2) == (
        f"{tmp_path / 'run' / METRICS_FILE}: removed 1 record(s) of step 3 an earlier run"
        " logged after step 2, where this run resumes; it logs those steps again"
    )


def test_two_records_of_one_step(tmp_path):
    """A step logged twice (its validation on a line of its own) is still one step."""
    note = _note(tmp_path, (1, 2, 3, 3), 2)
    assert note is not None and "removed 2 record(s) of step 3 an earlier run" in note


def test_a_run_resuming_nothing_names_its_one_step(tmp_path):
    assert _note(tmp_path, (0,), -1) == (
        f"{tmp_path / 'run' / METRICS_FILE}: removed 1 record(s) of step 0 an earlier run"
        " logged; this run resumes no checkpoint"
    )


def test_several_steps_stay_a_range(tmp_path):
    note = _note(tmp_path, (1, 2, 3, 4), 2)
    assert note is not None and "removed 2 record(s) of steps 3-4 an earlier run" in note
