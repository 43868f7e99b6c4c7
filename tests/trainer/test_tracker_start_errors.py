"""A tracker that fails to start in the run (wandb.init, TensorBoard's writer) is one line
naming it and why, exit 1: it was the library's traceback, from inside a rank."""

from __future__ import annotations

import signal

import pytest

from tests.support.sft import tiny_config
from trainer.metrics import MetricsLogger, TrackerStartError


def _refuse(*args, **kwargs):
    raise RuntimeError("api_key not configured (no-tty)\ncall wandb.login(key=[your_api_key])")


def test_wandb_init_failing_is_one_line_exit_1(tmp_path, monkeypatch, capsys):
    wandb = pytest.importorskip("wandb")
    from cli.errors import report_errors

    monkeypatch.setattr(wandb, "init", _refuse)
    cfg = tiny_config(tmp_path / "absent.jsonl", tmp_path / "run", "trainer.logger=[wandb]")
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(SystemExit) as exited:
            report_errors(lambda: MetricsLogger(tmp_path / "run", True, cfg.trainer))
    finally:
        signal.signal(signal.SIGINT, handlers[0])
        signal.signal(signal.SIGTERM, handlers[1])
    assert exited.value.code == 1
    assert capsys.readouterr().err.splitlines() == [
        "error: trainer.logger wandb: could not start (RuntimeError: api_key not configured"
        " (no-tty) ...); fix that, or leave wandb out of trainer.logger"
    ]


def test_tensorboard_writer_failing_names_tensorboard(tmp_path, monkeypatch):
    import torch.utils.tensorboard

    monkeypatch.setattr(torch.utils.tensorboard, "SummaryWriter", _refuse)
    cfg = tiny_config(tmp_path / "absent.jsonl", tmp_path / "run", "trainer.tensorboard=true")
    with pytest.raises(TrackerStartError, match=r"^trainer.logger tensorboard: could not start"):
        MetricsLogger(tmp_path / "run", True, cfg.trainer)
