"""A full disk while a run logs a step: the record is appended whole or not at all, and the
error names metrics.jsonl. Was: the write left a torn record, the error line read `File too
large` alone, and the resume kept the torn record, with the next record glued onto its line
(metrics.jsonl unreadable for good). The disk fills deterministically: RLIMIT_FSIZE in a
child process (writes past it fail with EFBIG)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.metrics import read_metrics
from trainer.config import SFTConfig
from trainer.metrics import METRICS_FILE, MetricsLogger, drop_steps_after

LOGGING = """
import resource, sys
from pathlib import Path
from trainer.config import SFTConfig
from trainer.metrics import MetricsLogger
run, limit = Path(sys.argv[1]), int(sys.argv[2])
logger = MetricsLogger(run, True, SFTConfig().trainer)
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
for step in range(1, 100):
    try:
        logger.log(step, {"train/loss": 1.0, "pad": "x" * 100})
    except OSError as err:
        print(step, err.filename, err.strerror)
        break
"""
LIMIT = 700  # bytes: a few records, the next one cut short


def test_a_record_the_disk_cannot_hold_is_not_left_torn_and_names_the_file(tmp_path):
    run = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-c", LOGGING, str(run), str(LIMIT)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    step, filename, reason = done.stdout.split(maxsplit=2)
    assert (filename, reason.strip()) == (str(run / METRICS_FILE), "File too large"), done.stderr
    text = (run / METRICS_FILE).read_bytes()
    assert len(text) < LIMIT and text.endswith(b"\n")  # the cut record was cut back off
    assert [record["step"] for record in read_metrics(run)] == list(range(1, int(step)))


def _record(step: int) -> str:
    return json.dumps({"step": step, "train/loss": float(step)}) + "\n"


def test_a_resume_drops_a_torn_last_line(tmp_path):
    """Left by an older mfsdp, or a crash mid-write: the resume removes it, so that the
    records it logs next each start their own line."""
    run = tmp_path / "run"
    run.mkdir()
    (run / METRICS_FILE).write_text(_record(1) + _record(2) + '{"step": 3, "train/lo')
    assert drop_steps_after(run, 2) == (
        f"{run / METRICS_FILE}: removed a torn last line (a write cut short)"
    )
    MetricsLogger(run, True, SFTConfig().trainer).log(3, {"train/loss": 3.0})
    assert [record["step"] for record in read_metrics(run)] == [1, 2, 3]
    assert (run / METRICS_FILE).read_text().count("\n") == 3


def test_a_resume_drops_a_torn_last_line_with_the_later_records(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / METRICS_FILE).write_text(_record(1) + _record(2) + _record(3) + '{"step": 4, "t')
    assert drop_steps_after(run, 2) == (
        f"{run / METRICS_FILE}: removed 1 record(s) of step 3 an earlier run logged after"
        " step 2 and a torn last line (a write cut short), where this run resumes; it logs"
        " those steps again"
    )
    assert (run / METRICS_FILE).read_text() == _record(1) + _record(2)
