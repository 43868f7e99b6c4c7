"""Experiment trackers (trainer.logger, verl's names): TensorBoard event files and a wandb
offline run directory hold the run's metrics; a missing package is one line before training."""

import json
import os
import sys

import pytest

from tests.support.metrics import read_metrics
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.config import ConfigError
from trainer.sft import run_sft


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory):
    """Two SFT steps with every tracker on; wandb offline (no network here, none needed)."""
    pytest.importorskip("wandb")  # the `dev` extra installs it; only a bare install lacks it
    root = tmp_path_factory.mktemp("trackers")
    data = write_chat_jsonl(root / "train.jsonl", rows=16)
    cfg = tiny_config(
        data,
        root / "run",
        "trainer.total_steps=2",
        "trainer.logger=[console,jsonl,tensorboard,wandb]",
        "trainer.project_name=mfsdp-tests",
        "trainer.experiment_name=tracked",
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WANDB_MODE", "offline")
        patch.setenv("WANDB_SILENT", "true")
        run_sft(cfg)
    return root / "run"


def test_tensorboard_events_read_back(tracked_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tracked_run / "tensorboard"))
    events.Reload()
    logged = {row["step"]: row["train/loss"] for row in read_metrics(tracked_run)}
    scalars = {event.step: event.value for event in events.Scalars("train/loss")}
    assert sorted(scalars) == sorted(logged) == [1, 2]
    assert all(scalars[step] == pytest.approx(logged[step], rel=1e-6) for step in logged)


def test_wandb_offline_run_holds_the_metrics(tracked_run):
    runs = list((tracked_run / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    records = next(runs[0].glob("run-*.wandb")).read_bytes()  # wandb's protobuf record log
    last = read_metrics(tracked_run)[-1]
    assert b"mfsdp-tests" in records and b"tracked" in records
    for key in ("train/loss", "train/lr", "train/grad_norm"):
        assert key.encode() in records and json.dumps(last[key]).encode() in records


def test_a_missing_tracker_package_is_one_line_before_training(tmp_path, monkeypatch):
    from trainer.metrics import require_trackers

    monkeypatch.setitem(
        sys.modules, "wandb", None
    )  # as if not installed: find_spec and import fail
    cfg = tiny_config(tmp_path / "absent.jsonl", tmp_path / "run", "trainer.logger=[console,wandb]")
    with pytest.raises(
        ConfigError,
        match=r"^trainer.logger has wandb but the wandb package is missing: pip install",
    ):
        require_trackers(cfg.trainer)


def test_tensorboard_flag_still_works_alone(tmp_path):
    from trainer.metrics import MetricsLogger

    cfg = tiny_config(tmp_path / "absent.jsonl", tmp_path / "run", "trainer.tensorboard=true")
    logger = MetricsLogger(tmp_path / "run", True, cfg.trainer)
    logger.log(1, {"train/loss": 2.5})
    logger.close()
    assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))


@pytest.mark.parametrize("tracker", ["tensorboard", "wandb"])
@pytest.mark.parametrize("special", ["file", "fifo", "link-to-file"])
def test_a_non_directory_where_a_tracker_writes_is_one_line_naming_it(tmp_path, special, tracker):
    from mfsdp_ckpt.errors import MfsdpFailedError
    from trainer.metrics import MetricsLogger

    cfg = tiny_config(
        tmp_path / "absent.jsonl", tmp_path / "run", f"trainer.logger=[console,{tracker}]"
    )
    board = tmp_path / "run" / tracker
    board.parent.mkdir()
    if special == "file":
        board.write_text("notes")
    elif special == "fifo":
        os.mkfifo(board)
    else:
        (tmp_path / "elsewhere").write_text("")
        board.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(MfsdpFailedError) as caught:
        MetricsLogger(tmp_path / "run", True, cfg.trainer)
    assert str(caught.value).startswith(f"{board}: exists and is not a directory;"), caught.value
