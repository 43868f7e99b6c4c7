"""What `MetricsLogger` writes: metrics.jsonl is strict JSON (a value that is not finite is
`null`) while TensorBoard gets the value as it is; a record logged again at a step an
earlier run logged (a resume's validation at the step it resumes) is merged into that
step's record, and TensorBoard purges from it, so the step shows once.

Was: `"val/loss": NaN` in metrics.jsonl (strict readers refused the line) and no point at
all in TensorBoard or wandb; a resumed GRPO run's `val_before_train` record was a second
record of its step, in the file and in TensorBoard."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.support.metrics import read_metrics
from tests.support.sft import tiny_config
from trainer.metrics import METRICS_FILE, MetricsLogger, jsonl_note


def _refuse(constant: str) -> None:
    raise ValueError(f"not strict JSON: {constant}")


def _logger(run: Path, merge_step: int | None = None) -> MetricsLogger:
    cfg = tiny_config(run / "absent.jsonl", run, "trainer.logger=[console,jsonl,tensorboard]")
    return MetricsLogger(run, True, cfg.trainer, merge_step)


def _scalars(run: Path, key: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    return [(event.step, event.value) for event in events.Scalars(key)]


def test_a_value_that_is_not_finite_is_null_in_the_file_and_plotted(tmp_path):
    logger = _logger(tmp_path)
    logger.log(1, {"train/loss": 2.0, "val/loss": math.nan, "train/grad_norm": math.inf})
    logger.close()
    (line,) = (tmp_path / METRICS_FILE).read_text().splitlines()
    record = json.loads(line, parse_constant=_refuse)
    assert record["val/loss"] is None and record["train/grad_norm"] is None, record
    assert read_metrics(tmp_path)[0]["val/loss"] is None
    ((step, value),) = _scalars(tmp_path, "val/loss")
    assert step == 1 and math.isnan(value)
    assert _scalars(tmp_path, "train/grad_norm") == [(1, math.inf)]


def test_a_step_logged_again_is_merged_into_its_record_and_shows_once(tmp_path):
    earlier = _logger(tmp_path)
    for step in (1, 2, 3):
        earlier.log(step, {"train/loss": float(step)})
    earlier.close()
    resumed = _logger(tmp_path, merge_step=3)  # resumes step 3, validates it first
    resumed.log(3, {"val/accuracy": 0.5})
    resumed.log(4, {"train/loss": 4.0})
    resumed.close()
    records = read_metrics(tmp_path)
    assert [r["step"] for r in records] == [1, 2, 3, 4], records
    assert records[2]["train/loss"] == 3.0 and records[2]["val/accuracy"] == 0.5, records
    assert _scalars(tmp_path, "train/loss") == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0)]
    assert _scalars(tmp_path, "val/accuracy") == [(3, 0.5)]


def test_a_merge_step_with_no_earlier_record_logs_it_alone(tmp_path):
    logger = _logger(tmp_path, merge_step=0)  # a fresh run's val_before_train
    logger.log(0, {"val/accuracy": 0.25})
    logger.close()
    assert [(r["step"], r["val/accuracy"]) for r in read_metrics(tmp_path)] == [(0, 0.25)]


@pytest.mark.parametrize("logger", [[], ["console"], ["console", "tensorboard"]])
def test_a_logger_without_jsonl_gets_one_note(logger):
    note = jsonl_note(logger)
    assert note is not None and "metrics.jsonl is written all the same" in note


def test_a_logger_with_jsonl_gets_none():
    assert jsonl_note(["console", "jsonl"]) is None


def test_a_null_value_reads_back_as_not_finite_in_the_run_summary(tmp_path):
    """A rerun's summary (`--json` and the result line) reads a logged `null` as the value it
    was, not finite (`null` in JSON, `nan` in the line), not as an older finite one."""
    from cli.run_report import final_value

    lines = ['{"step": 2, "val/loss": 1.5}', '{"step": 3, "val/loss": null}']
    (tmp_path / METRICS_FILE).write_text("\n".join(lines) + "\n")
    finished = SimpleNamespace(run_dir=tmp_path, final_step=3)  # a rerun that trained none
    assert math.isnan(final_value(finished, {}, "val/loss"))
