"""Training metrics: one JSON line per logged step in `<run_dir>/metrics.jsonl` (rank 0),
optionally TensorBoard event files under `<run_dir>/tensorboard/`, and the progress bar."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"


class MetricsLogger:
    def __init__(self, run_dir: str | Path, enabled: bool, tensorboard: bool = False):
        self.enabled = enabled
        self.path = Path(run_dir) / METRICS_FILE
        self._writer = None
        if enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if tensorboard:
                try:
                    from torch.utils.tensorboard import SummaryWriter
                except ImportError as err:
                    raise RuntimeError(
                        "trainer.tensorboard=true needs the tensorboard package: pip install tensorboard"
                    ) from err
                self._writer = SummaryWriter(str(Path(run_dir) / TENSORBOARD_DIR))

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        if not self.enabled:
            return
        record = {"step": step, "time": round(time.time(), 3), **metrics}
        with open(self.path, "a") as handle:
            handle.write(json.dumps(record) + "\n")
        if self._writer is not None:
            for key, value in metrics.items():
                if isinstance(value, (int, float)) and math.isfinite(value):
                    self._writer.add_scalar(key, value, step)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def progress_bar(desc: str, total: int, initial: int, enabled: bool) -> tqdm:
    """Steps `initial` (resumed) to `total` on stderr, labelled with the runner's name (`desc`)."""
    return tqdm(total=total, initial=initial, desc=desc, unit="step", disable=not enabled, dynamic_ncols=True)


def bar_postfix(metrics: dict[str, Any]) -> dict[str, str]:
    shown = {
        "loss": f"{metrics['train/loss']:.4f}",
        "lr": f"{metrics['train/lr']:.2e}",
        "gnorm": f"{metrics['train/grad_norm']:.3f}",
        "tok/s": f"{metrics['perf/tokens_per_s']:.0f}",
    }
    if metrics.get("val/loss") is not None:
        shown["val"] = f"{metrics['val/loss']:.4f}"
    if metrics.get("perf/mfu") is not None:
        shown["mfu"] = f"{100 * metrics['perf/mfu']:.1f}%"
    return shown
