"""What a run logged to metrics.jsonl, for tests that check losses, rewards and steps."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mfsdp_ckpt.storage import safe_files
from trainer.metrics import METRICS_FILE, _lines, _record_of


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every record in metrics.jsonl, in order ([] when there is none). Read as
    `drop_steps_after` reads it: a regular file (never a FIFO, which blocked this for
    ever), a line at a time, none held past MAX_RECORD_BYTES, each parsed bounded
    (`_record_of`); a line that is no record (a torn write, an edit, a longer line) is
    skipped, as the step counting skips it, where Python's json raised or parsed it whole."""
    path = Path(run_dir) / METRICS_FILE
    if not os.path.lexists(path):
        return []
    with os.fdopen(safe_files.open_regular(path), "rb") as handle:
        return [record for record, _pieces in _lines(handle, _record_of) if record is not None]
