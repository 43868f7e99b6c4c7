"""metrics.jsonl is read in bounded pieces when a resumed run removes the records it logs
again (`trainer.metrics.drop_steps_after`).

Was: each line was read whole; a 700 MB metrics.jsonl with no newline (`truncate -s 700M`)
took 1.9 GB to resume, growing with the file. A line longer than any record is kept as it
is, as a torn or edited line is."""

from __future__ import annotations

import json
import os
import tracemalloc

from trainer.metrics import MAX_RECORD_BYTES, METRICS_FILE, drop_steps_after

LONG = 16 << 20  # far past MAX_RECORD_BYTES: held whole, it shows in the peak


def _record(step: int) -> bytes:
    return (json.dumps({"step": step, "train/loss": float(step)}) + "\n").encode()


def _peak_of(call):
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_file_of_one_huge_line_is_read_in_bounded_pieces(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    metrics = run / METRICS_FILE
    metrics.write_bytes(b"")
    os.truncate(metrics, LONG)  # zero bytes, no newline: no record
    note, peak = _peak_of(lambda: drop_steps_after(run, 2))
    assert note is None
    assert peak < 8 * MAX_RECORD_BYTES, peak  # a few pieces, never the line
    assert metrics.stat().st_size == LONG


def test_a_huge_line_among_records_is_kept_and_the_later_records_go(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    metrics = run / METRICS_FILE
    huge = b'{"step": 1, "note": "' + b"x" * LONG + b'"}'  # no record: past the bound
    metrics.write_bytes(_record(1) + _record(2) + huge + b"\n" + _record(3) + b"{" * LONG)
    note, peak = _peak_of(lambda: drop_steps_after(run, 2))
    assert note is not None and "removed 1 record(s) of step 3" in note
    assert peak < 8 * MAX_RECORD_BYTES, peak  # a few pieces, never the line
    # the unfinished last line keeps its bytes and gets its newline, as a torn record does
    expected = _record(1) + _record(2) + huge + b"\n" + b"{" * LONG + b"\n"
    assert metrics.read_bytes() == expected
    assert os.listdir(run) == [METRICS_FILE]


def test_a_record_of_up_to_the_bound_still_counts(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    padding = MAX_RECORD_BYTES - len(_record(3)) - len(', "pad": ""')
    record = _record(3)[:-2] + b', "pad": "' + b"p" * padding + b'"}\n'
    assert len(record) == MAX_RECORD_BYTES
    (run / METRICS_FILE).write_bytes(_record(1) + record)
    assert "of step 3 " in (drop_steps_after(run, 1) or "")
    assert (run / METRICS_FILE).read_bytes() == _record(1)
