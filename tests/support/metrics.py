"""What a run logged to metrics.jsonl, for tests that check losses, rewards and steps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainer.metrics import logged_records


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every record in metrics.jsonl, in order ([] when there is none), read bounded as the
    trainer reads it (`logged_records`)."""
    return list(logged_records(run_dir))
