"""Ctrl-C's line names the step the run reached beside the checkpoint it resumes from: the
launching process reads the newest step rank 0 logged to metrics.jsonl since it started
(lines of earlier runs in the same run dir do not count)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import torch

from cli.run_report import interrupted_run
from mfsdp_ckpt.checkpointer import Checkpointer
from tests.support.paths import EXAMPLES
from trainer.config import SFTConfig, load_config
from trainer.metrics import last_logged_step, metrics_size


def _cfg(run: Path, *overrides: str):
    return load_config(
        SFTConfig, str(EXAMPLES / "sft_tiny_cpu.yaml"), [f"trainer.run_dir={run}", *overrides]
    )


def _log(run: Path, *steps: int, tail: str = "") -> None:
    run.mkdir(parents=True, exist_ok=True)
    with open(run / "metrics.jsonl", "a") as handle:
        handle.writelines(json.dumps({"step": s, "train/loss": 1.0}) + "\n" for s in steps)
        handle.write(tail)


def test_the_line_names_the_step_reached_and_the_checkpoint(tmp_path):
    """Was: only the newest checkpoint (step 2), as if the run had stopped there."""
    run = tmp_path / "run"
    _log(run, 1, 2)  # an earlier run's lines
    before = metrics_size(run)
    Checkpointer(run, strategy="none").save(2, {"model": {"w": torch.ones(2)}}, contents=("model",))
    _log(run, 3, 4, 5, tail='{"step": 6, "train/lo')  # step 6's line is still being written
    assert interrupted_run(_cfg(run), before) == (
        f"interrupted after step 5; the newest checkpoint is {run}/global_step_2: "
        "run the same command again to resume from it"
    )


def test_steps_logged_every_few_are_named_as_a_lower_bound(tmp_path):
    run = tmp_path / "run"
    _log(run, 10, 20)
    assert interrupted_run(_cfg(run, "trainer.log_every=10"), 0) == (
        f"interrupted after step 20 or later (trainer.log_every=10); no checkpoint was saved"
        f" in {run} yet"
    )


def test_an_earlier_runs_lines_are_not_this_runs_step(tmp_path):
    run = tmp_path / "run"
    _log(run, 1, 2, 3)
    before = metrics_size(run)
    assert last_logged_step(run, before) is None
    assert interrupted_run(_cfg(run), before) == (
        f"interrupted; no checkpoint was saved in {run} yet"
    )
    assert last_logged_step(tmp_path / "none", 0) is None


def test_a_file_a_resume_cut_below_the_size_noted_at_launch_names_this_runs_step(tmp_path):
    """Was: ValueError (a negative read length) from every rank and the launcher, 250
    lines of tracebacks and exit 1 for a Ctrl-C, when the resumed run's ranks had cut the
    earlier run's later records (`drop_steps_after`) and not yet logged as many bytes."""
    run = tmp_path / "run"
    _log(run, 1, 2, 3, 4, 5)  # an earlier run got to step 5, its newest checkpoint step 2
    before = metrics_size(run)
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "train/loss": 1.0}) + "\n" for s in (1, 2))
    )  # this run resumed from step 2 and cut steps 3-5
    assert last_logged_step(run, before) == 2
    _log(run, 3)
    assert last_logged_step(run, before) == 3
    assert interrupted_run(_cfg(run), before) == (
        f"interrupted after step 3; no checkpoint was saved in {run} yet"
    )


def test_a_step_stopped_in_its_save_is_named_as_unsaved(tmp_path):
    """Was: "interrupted after step 5; no checkpoint was saved" beside save_every=5, read
    as a step-5 checkpoint that the cut-short save had removed."""
    run = tmp_path / "run"
    _log(run, 1, 2, 3, 4, 5)
    assert interrupted_run(_cfg(run, "checkpoint.save_every=5"), 0) == (
        f"interrupted after step 5 (step 5's save was cut short and removed); no checkpoint"
        f" was saved in {run} yet"
    )
    _log(run, 6)
    assert interrupted_run(_cfg(run, "checkpoint.save_every=5"), 0) == (
        f"interrupted after step 6; no checkpoint was saved in {run} yet"
    )


def test_the_newest_step_of_a_long_file_is_found_from_its_tail(tmp_path):
    """The tail read starts inside a line; that cut line is not taken for a record."""
    run = tmp_path / "run"
    _log(run, *range(1, 20_001))  # about 700 KB
    assert last_logged_step(run, 0) == 20_000


def test_ctrl_c_with_an_async_save_in_flight_commits_it_before_the_run_ends(tmp_path, monkeypatch):
    """Was: the run ended (process group destroyed, run dir lock released, the line naming
    the step before as the newest) while the save's thread went on to commit step 2 and
    prune after it: a run started again meanwhile overlapped its commit."""
    import pytest

    from mfsdp_ckpt.format import run_steps
    from tests.support.sft import tiny_config, write_chat_jsonl
    from trainer import sft

    commit = Checkpointer._commit

    def slow_commit(self, *args, **kwargs):
        time.sleep(0.5)  # the save is still in flight when Ctrl-C comes
        commit(self, *args, **kwargs)

    def ctrl_c_at_step_3(self, step):
        raise KeyboardInterrupt

    monkeypatch.setattr(Checkpointer, "_commit", slow_commit)
    run = tmp_path / "run"
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    cfg = tiny_config(
        data,
        run,
        "data.global_batch_size=8",
        "data.max_tokens_per_micro_batch=256",
        "trainer.total_steps=4",
        "checkpoint.save_every=2",
        "checkpoint.async_save=true",
    )
    train_step = sft.SFTSteps.train_step
    monkeypatch.setattr(
        sft.SFTSteps,
        "train_step",
        lambda self, step: ctrl_c_at_step_3(self, step) if step == 2 else train_step(self, step),
    )
    with pytest.raises(KeyboardInterrupt):
        sft.run_sft(cfg)
    assert run_steps.read_tracker(run) == 2 and run_steps.list_complete_steps(run) == [2]
    main = threading.main_thread()
    assert [t for t in threading.enumerate() if not t.daemon and t is not main] == []
