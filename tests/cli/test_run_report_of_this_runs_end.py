"""A train command's last line and --json describe the run just made, whatever ended it: the
steps its own config sets (`total_steps`, epochs counted), and `stopped_early` only where
`trainer.stop_at_step` ended it. They read the total from the last checkpoint's manifest: a
resume with `trainer.total_steps` lowered below the step reached, which saves nothing, said
"stopped at step 4 of 40 by trainer.stop_at_step" (the interrupted run's total) right after
"nothing left to train", and --json said `stopped_early: true`. The runs are in-process and
tiny; the line and the JSON are those `mfsdp train` prints (`report_run`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from cli.run_report import interrupted_run, report_run
from cli.train import train_sft
from cli.train_grpo import train_grpo
from mfsdp_ckpt.checkpointer import Checkpointer
from tests.support.grpo import grpo_config, write_rl_rows
from tests.support.sft import tiny_config, write_chat_jsonl

SFT = ("data.global_batch_size=4", "data.max_tokens_per_micro_batch=256")


def _ends(capsys, kind: str, train, cfg) -> tuple[str, dict]:
    """The line and the JSON that `mfsdp train KIND` ends a run of `cfg` with."""
    result, finals = train(cfg)
    capsys.readouterr()
    report_run(kind, result, False, finals)
    report_run(kind, result, True, finals)
    line, summary = capsys.readouterr().out.strip().splitlines()
    return line, json.loads(summary)


def _said(summary: dict, final: int, total: int, stopped: bool) -> None:
    assert (summary["final_step"], summary["total_steps"]) == (final, total), summary
    assert summary["stopped_early"] is stopped, summary


@pytest.fixture(scope="module")
def sft_data(tmp_path_factory) -> Path:
    return write_chat_jsonl(tmp_path_factory.mktemp("data") / "train.jsonl", rows=8)


def test_every_end_of_an_sft_run_is_this_runs(sft_data, tmp_path, capsys):
    run = tmp_path / "run"

    def ends(*overrides: str) -> tuple[str, dict]:
        return _ends(capsys, "sft", train_sft, tiny_config(sft_data, run, *SFT, *overrides))

    line, summary = ends("trainer.total_steps=8", "trainer.stop_at_step=2")
    _said(summary, 2, 8, True)
    assert line.startswith("sft: stopped at step 2 of 8 by trainer.stop_at_step, loss "), line

    line, summary = ends("trainer.total_steps=1")  # nothing left: step 2 is past its end
    _said(summary, 2, 1, False)
    assert summary["resumed_from"] == 2 and "stop_at_step" not in line, line
    assert line.startswith("sft: step 2, loss ") and "next: `mfsdp ckpt export-hf" in line, line

    line, summary = ends("trainer.total_steps=8", "trainer.stop_at_step=1")  # nothing left
    _said(summary, 2, 8, True)  # raising trainer.stop_at_step goes on, as its line says
    assert line.startswith("sft: stopped at step 2 of 8 by trainer.stop_at_step"), line

    _line, summary = ends("trainer.total_steps=null", "trainer.epochs=1")  # 8 rows, 4 a step
    _said(summary, 2, 2, False)


def test_a_grpo_resume_past_a_lowered_total_is_not_stopped_early(tmp_path, capsys):
    data, run = write_rl_rows(tmp_path / "train.jsonl"), tmp_path / "run"

    def ends(*overrides: str) -> tuple[str, dict]:
        return _ends(capsys, "grpo", train_grpo, grpo_config(data, run, *overrides))

    _line, summary = ends("trainer.total_steps=4", "trainer.stop_at_step=2")
    _said(summary, 2, 4, True)
    line, summary = ends("trainer.total_steps=1")  # nothing left: step 2 is past its end
    _said(summary, 2, 1, False)
    assert line.startswith("grpo: step 2") and "stop_at_step" not in line, line


def test_ctrl_c_past_a_lowered_total_names_no_step_of_fewer(sft_data, tmp_path):
    """Ctrl-C while a resume past a lowered end started up said "step 4 of 3"."""
    run = tmp_path / "run"
    Checkpointer(run, strategy="none").save(4, {"model": {"w": torch.ones(2)}}, contents=("model",))
    line = interrupted_run(tiny_config(sft_data, run, *SFT, "trainer.total_steps=3"), 0)
    assert line == (
        f"interrupted after training finished (step 4, past its last step 3); its final"
        f" checkpoint is {run}/global_step_4"
    )
