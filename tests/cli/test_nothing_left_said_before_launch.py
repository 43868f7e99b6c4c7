"""A run whose run dir already holds its last step says "nothing left to train" from the
launching process, before torch loads and before any rank starts, with the line and the
result (exit 0, the JSON object with --json) its ranks ended with.

Was: `mfsdp train sft --nproc-per-node 2` on such a run dir started torchrun and two ranks,
each loading torch and building the model, only to say so seconds later.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.checkpointer import Checkpointer
from tests.support.fresh_python import mfsdp
from tests.support.grpo import write_rl_rows
from tests.support.paths import EXAMPLES
from tests.support.sft import write_chat_jsonl
from trainer.resume import RUN_INFO_KEY

LAST_STEP = 3
STARTING = ("loading torch", "launching", "building the model")  # lines of a run that starts


def _finished_run(run: Path, kind: str) -> Path:
    """A run dir whose newest step, written by `mfsdp train KIND`, is LAST_STEP."""
    return Checkpointer(run, strategy="none").save(
        LAST_STEP, {"model": {"w": torch.ones(2)}}, contents=("model",), info={RUN_INFO_KEY: kind}
    )


def _train(tmp_path: Path, kind: str, *overrides: str) -> list[str]:
    """`mfsdp train KIND --json` on the tiny example into tmp_path/run, on data made here."""
    if kind == "sft":
        data = write_chat_jsonl(tmp_path / "train.jsonl")
    else:
        data = write_rl_rows(tmp_path / "train.jsonl", rows=16)
    config = EXAMPLES / f"{kind}_tiny_cpu.yaml"
    return [
        "train",
        kind,
        "--config",
        str(config),
        "--json",
        f"data.train_files={data}",
        "data.val_files=[]" if kind == "grpo" else "data.val_ratio=0",
        f"trainer.run_dir={tmp_path / 'run'}",
        "trainer.progress_bar=false",
        *overrides,
    ]


def _nothing_left(step_dir: Path, kind: str, key: str, value: int) -> str:
    return (
        f"[{kind}] {step_dir} is at step {LAST_STEP} and {key}={value}: nothing left to train"
        f" (raise {key} to train on, or give another trainer.run_dir to start afresh)"
    )


def _result(tmp_path: Path, step_dir: Path, values: tuple[str, ...]) -> dict:
    return {
        "run_dir": str(tmp_path / "run"),
        "final_step": LAST_STEP,
        "resumed_from": LAST_STEP,
        **{key: None for key in values},
        "checkpoint": str(step_dir),
    }


@pytest.mark.parametrize(
    "kind, values", [("sft", ("final_loss", "val_loss")), ("grpo", ("reward_mean", "val_accuracy"))]
)
@pytest.mark.parametrize("ranks", ["1", "2"])
def test_a_finished_run_says_nothing_is_left_before_any_rank_starts(tmp_path, kind, values, ranks):
    step_dir = _finished_run(tmp_path / "run", kind)
    args = _train(tmp_path, kind, f"trainer.total_steps={LAST_STEP}")
    done = mfsdp(*args, "--nproc-per-node", ranks)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        _nothing_left(step_dir, kind, "trainer.total_steps", LAST_STEP)
    ]
    assert json.loads(done.stdout) == _result(tmp_path, step_dir, values)


@pytest.mark.parametrize("ranks", ["1", "2"])
def test_a_step_named_at_or_past_the_end_says_so_with_the_key_that_ends_the_run(tmp_path, ranks):
    step_dir = _finished_run(tmp_path / "run", "sft")
    args = _train(tmp_path, "sft", "trainer.total_steps=10", "trainer.stop_at_step=2")
    done = mfsdp(*args, f"checkpoint.resume={step_dir}", "--nproc-per-node", ranks)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [_nothing_left(step_dir, "sft", "trainer.stop_at_step", 2)]
    assert json.loads(done.stdout) == _result(tmp_path, step_dir, ("final_loss", "val_loss"))


def test_a_finished_run_of_the_other_kind_is_refused_before_any_rank_starts(tmp_path):
    """GRPO on a run dir SFT finished: refused as a resume refuses it, not `nothing left`."""
    step_dir = _finished_run(tmp_path / "run", "sft")
    done = mfsdp(*_train(tmp_path, "grpo", f"trainer.total_steps={LAST_STEP}"))
    assert done.returncode == 2, done.stderr
    assert json.loads(done.stdout)["error"].startswith(
        f"{step_dir}: `mfsdp train sft` wrote this checkpoint; `mfsdp train grpo` does not"
    )
    assert not any(starting in done.stderr for starting in STARTING), done.stderr


def test_the_result_said_before_launch_is_the_one_the_ranks_said(tmp_path):
    """The same JSON keys as a run that trained: a run at its end resumes with no values."""
    args = _train(tmp_path, "sft", "trainer.total_steps=1", "trainer.eval_every=0")
    trained = mfsdp(*args)
    assert trained.returncode == 0, trained.stderr
    again = mfsdp(*args)
    assert again.returncode == 0, again.stderr
    first = json.loads(trained.stdout)
    assert json.loads(again.stdout) == {
        **first,
        "resumed_from": 1,
        "final_loss": None,
        "val_loss": None,
    }
