"""A run that starts from an earlier step than metrics.jsonl reaches (`checkpoint.resume=PATH`,
or a crash after steps logged past the last checkpoint) first removes the records of the
steps it trains again (`trainer.metrics.drop_steps_after`): the file held both timelines,
steps 1-4 and then 3-4 again."""

from __future__ import annotations

import json
import os
import shutil

from tests.support.metrics import read_metrics
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.metrics import METRICS_FILE, drop_steps_after
from trainer.sft import run_sft


def _write(run, *lines: str) -> os.stat_result:
    run.mkdir(parents=True, exist_ok=True)
    (run / METRICS_FILE).write_text("".join(lines))
    return os.stat(run / METRICS_FILE)


def _record(step: int) -> str:
    return json.dumps({"step": step, "train/loss": float(step)}) + "\n"


def test_records_after_the_step_go_and_other_lines_stay(tmp_path):
    run = tmp_path / "run"
    edited = '{"step": 1, "train/lo\n'
    _write(run, _record(0), _record(1), _record(2), "not json\n", edited, _record(3), _record(4))
    note = drop_steps_after(run, 2)
    assert note == (
        f"{run / METRICS_FILE}: removed 2 record(s) of steps 3-4 an earlier run logged after"
        " step 2, where this run resumes; it logs those steps again"
    )
    text = (run / METRICS_FILE).read_text()
    assert text == _record(0) + _record(1) + _record(2) + "not json\n" + edited
    assert os.listdir(run) == [METRICS_FILE]  # no temp file left


def test_a_file_with_nothing_to_remove_is_left_as_it_is(tmp_path):
    run = tmp_path / "run"
    before = _write(run, _record(1), _record(2))
    assert drop_steps_after(run, 2) is None
    assert os.stat(run / METRICS_FILE).st_ino == before.st_ino
    assert drop_steps_after(tmp_path / "none", 2) is None


def test_a_run_that_resumes_nothing_removes_every_record(tmp_path):
    """A run that saved no checkpoint starts over: its records, GRPO's step-0 validation
    included, are another timeline's."""
    run = tmp_path / "run"
    _write(run, _record(0), _record(1), _record(2))
    assert drop_steps_after(run, -1) == (
        f"{run / METRICS_FILE}: removed 3 record(s) of steps 0-2 an earlier run logged; this run"
        " resumes no checkpoint"
    )
    assert (run / METRICS_FILE).read_text() == ""


def test_a_resume_from_an_earlier_step_logs_each_step_once(tmp_path, capsys):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    run = tmp_path / "run"
    common = ("data.global_batch_size=8", "trainer.device=cpu", "checkpoint.save_every=2")
    run_sft(tiny_config(data, run, *common, "trainer.total_steps=4"))
    run_sft(tiny_config(data, run, *common, "trainer.total_steps=2", "checkpoint.resume=auto"))
    assert [r["step"] for r in read_metrics(run)] == [1, 2, 3, 4]  # nothing trained: kept
    capsys.readouterr()
    resume = f"checkpoint.resume={run / 'global_step_2'}"
    shutil.move(run / "global_step_4", tmp_path / "step_4")  # a rollback moves later steps away
    run_sft(tiny_config(data, run, *common, "trainer.total_steps=4", resume))
    assert [r["step"] for r in read_metrics(run)] == [1, 2, 3, 4]
    assert (
        f"[sft] {run / METRICS_FILE}: removed 2 record(s) of steps 3-4" in capsys.readouterr().err
    )
