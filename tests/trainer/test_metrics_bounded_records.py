"""Each metrics.jsonl line is parsed by the bounded JSON reader, by `read_metrics` and the
step counters alike: a line that is no record (torn, nested past any record, holding more
objects than one, longer than a record may be) is skipped, as a torn line always was by
the step counting, in bounded memory.

Was: `read_metrics` read the file whole and gave each line to Python's json, so a torn
line raised JSONDecodeError, a deeply nested one RecursionError, and a line of 300,000 `{}`
was parsed whole and returned as a "record"; `last_logged_step` raised RecursionError on a
nested line in the file's tail."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from tests.support.metrics import read_metrics
from trainer.metrics import MAX_RECORD_BYTES, METRICS_FILE, last_logged_step

NOT_RECORDS = {
    "torn": b'{"step": 3, "train/lo',
    "nested": b"[" * 100_000 + b"]" * 100_000,
    "many objects": b"[" + b"{}," * 300_000 + b"{}]",
    "key twice": b'{"step": 3, "step": 4}',
    "not an object": b"[1, 2]",
    "longer than a record": b'{"step": 3, "pad": "' + b"x" * MAX_RECORD_BYTES + b'"}',
}


def _record(step: int) -> bytes:
    return json.dumps({"step": step, "train/loss": 1.0 / step}).encode() + b"\n"


def _run(tmp_path: Path, *lines: bytes) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / METRICS_FILE).write_bytes(b"".join(lines))
    return run


@pytest.mark.parametrize("case", list(NOT_RECORDS))
def test_a_line_that_is_no_record_is_skipped_in_bounded_memory(case, tmp_path):
    run = _run(tmp_path, _record(1), NOT_RECORDS[case] + b"\n", _record(2))
    tracemalloc.start()
    try:
        records = read_metrics(run)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [record["step"] for record in records] == [1, 2]
    assert peak < 8 * MAX_RECORD_BYTES, peak  # the line's bytes, never a parsed tree of it


def test_a_nan_loss_is_still_a_record(tmp_path):
    """The logger writes a NaN loss as `null` (strict JSON); a run logged before wrote a bare
    `NaN` (Python's json): either way the step is still a record."""
    run = _run(tmp_path, b'{"step": 1, "train/loss": NaN}\n', b'{"step": 2, "train/loss": null}\n')
    first, second = read_metrics(run)
    assert first["step"] == 1 and first["train/loss"] != first["train/loss"]
    assert second["step"] == 2 and second["train/loss"] is None


def test_no_metrics_file_is_no_records(tmp_path):
    assert read_metrics(tmp_path) == []


@pytest.mark.parametrize("case", ["nested", "many objects", "key twice"])
def test_the_last_logged_step_skips_a_line_that_is_no_record(case, tmp_path):
    line = {  # within the file's tail that the launcher reads
        "nested": b"[" * 20_000 + b"]" * 20_000,
        "many objects": b"[" + b"{}," * 20_000 + b"{}]",
    }.get(case, NOT_RECORDS[case])
    run = _run(tmp_path, _record(1), _record(2), line + b"\n")
    assert last_logged_step(run, 0) == 2
