"""A resume's first record of the step it resumes is merged into what an earlier run logged of
that step: every record of it, in order (a later key wins), and in one replace of
metrics.jsonl. Was: the last record of the step alone was kept (an older mfsdp logged a
resume's validation as a second, validation-only record, so the step's training values were
lost), and the file was rewritten without the step before the merged record was appended, so
a failed append (a full disk) lost the step's record. The disk fills deterministically:
RLIMIT_FSIZE in a child process (writes past it fail with EFBIG)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.metrics import read_metrics
from trainer.config import SFTConfig
from trainer.metrics import METRICS_FILE, MetricsLogger


def _write(run: Path, records: list[dict]) -> bytes:
    text = "".join(json.dumps(record) + "\n" for record in records).encode()
    (run / METRICS_FILE).write_bytes(text)
    return text


def test_every_earlier_record_of_the_step_is_merged_in_order(tmp_path):
    _write(
        tmp_path,
        [
            {"step": 1, "train/loss": 1.0},
            {"step": 2, "train/loss": 2.0},
            {"step": 3, "train/loss": 3.0, "reward/mean": 0.3, "val/accuracy": 0.0},
            {"step": 3, "val/accuracy": 0.1, "val/reward": 0.2},  # an older resume's
        ],
    )
    resumed = MetricsLogger(tmp_path, True, SFTConfig().trainer, merge_step=3)
    resumed.log(3, {"val/accuracy": 0.5})
    resumed.log(4, {"train/loss": 4.0})
    resumed.close()
    records = [{k: v for k, v in r.items() if k != "time"} for r in read_metrics(tmp_path)]
    assert records == [
        {"step": 1, "train/loss": 1.0},
        {"step": 2, "train/loss": 2.0},
        {
            "step": 3,
            "train/loss": 3.0,
            "reward/mean": 0.3,
            "val/accuracy": 0.5,
            "val/reward": 0.2,
        },
        {"step": 4, "train/loss": 4.0},
    ]


MERGING = """
import resource, sys
from pathlib import Path
from trainer.config import SFTConfig
from trainer.metrics import MetricsLogger
run, limit = Path(sys.argv[1]), int(sys.argv[2])
logger = MetricsLogger(run, True, SFTConfig().trainer, merge_step=3)
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
try:
    logger.log(3, {"val/accuracy": 0.5, "pad": "x" * 200})
except OSError as err:
    print(type(err).__name__, err)
"""


def test_a_merge_the_disk_cannot_hold_leaves_the_file_as_it_was(tmp_path):
    before = _write(
        tmp_path,
        [{"step": step, "train/loss": float(step), "reward/mean": step / 10} for step in (1, 2, 3)],
    )
    done = subprocess.run(
        [sys.executable, "-c", MERGING, str(tmp_path), str(len(before) + 40)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (tmp_path / METRICS_FILE).read_bytes() == before, (done.stdout, done.stderr)
    assert done.stdout.startswith("RunFileError"), (done.stdout, done.stderr)
    assert str(tmp_path / METRICS_FILE) in done.stdout and "left as it was" in done.stdout
    assert sorted(path.name for path in tmp_path.iterdir()) == [METRICS_FILE]  # no temp left
