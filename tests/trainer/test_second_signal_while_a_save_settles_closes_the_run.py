"""A second Ctrl-C or SIGTERM that lands while an interrupted run waits for its async save to
commit (`Checkpointer.settle`, which holds it back until the save is done) still lets the
run close its trackers, its bar and what its kind holds (GRPO's rollout engine), and the run
ends as that signal ends it: one line, exit 130 or 143. Was: the held-back signal, raised as
the wait ended, skipped every close (TensorBoard's writer and wandb never finished)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from click.testing import CliRunner

from cli.main import app
from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.format import run_steps
from tests.reliability.sft_run import sft_args
from tests.support.sft import write_chat_jsonl
from trainer import sft
from trainer.metrics import MetricsLogger
from trainer.runner import StepHooks


@pytest.mark.parametrize(
    ("signum", "code", "said"),
    [
        (signal.SIGINT, 130, "error: interrupted"),
        (signal.SIGTERM, 143, "error: SIGTERM: interrupted"),
    ],
)
def test_a_signal_held_back_by_the_save_still_lets_every_close_run(
    tmp_path, monkeypatch, signum, code, said
):
    first_sent = threading.Event()
    closed: list[str] = []
    commit, await_pending = Checkpointer._commit, Checkpointer._await_pending
    train_step = sft.SFTSteps.train_step

    def slow_commit(self, *args, **kwargs):
        time.sleep(0.5)  # step 2's save is still in flight when the first signal comes
        commit(self, *args, **kwargs)

    def signalled_at_step_3(self, step):
        if step == 2:
            first_sent.set()
            os.kill(os.getpid(), signum)  # raised here, in the step
        return train_step(self, step)

    def second_signal_while_settling(self, thread):
        if first_sent.is_set():  # inside `settle`, which holds it back until the commit
            os.kill(os.getpid(), signum)
        await_pending(self, thread)

    def traced(name, close):
        def trace(self):
            closed.append(name)
            close(self)

        return trace

    monkeypatch.setattr(Checkpointer, "_commit", slow_commit)
    monkeypatch.setattr(Checkpointer, "_await_pending", second_signal_while_settling)
    monkeypatch.setattr(sft.SFTSteps, "train_step", signalled_at_step_3)
    monkeypatch.setattr(MetricsLogger, "close", traced("metrics", MetricsLogger.close))
    monkeypatch.setattr(StepHooks, "close", traced("hooks", StepHooks.close))
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    run = tmp_path / "run"
    args = sft_args(data, run, "trainer.total_steps=4", "checkpoint.save_every=2")
    done = CliRunner().invoke(app, [*args, "checkpoint.async_save=true"])
    assert closed == ["metrics", "hooks"], done.output
    assert done.exit_code == code, done.output
    last = done.output.strip().splitlines()[-1]
    assert last.startswith(f"{said} after step 2; the newest checkpoint is {run}/global_step_2")
    assert "Traceback" not in done.output
    assert run_steps.read_tracker(run) == 2 and run_steps.list_complete_steps(run) == [2]


def test_a_ctrl_c_in_one_closer_lets_the_others_run_then_goes_on():
    """It goes on in place of the failure in flight, and of a later closer's failure: it says
    how the process stops."""
    from cli.stop import Terminated
    from trainer.closing import close_all

    ran: list[str] = []

    def stopped(name: str, raised: BaseException):
        def close() -> None:
            ran.append(name)
            raise raised

        return close

    stop = Terminated()
    with pytest.raises(Terminated) as caught:
        close_all(
            [
                stopped("settle", stop),
                stopped("metrics", OSError(28, "full")),
                lambda: ran.append("hooks"),
            ],
            KeyboardInterrupt(),
        )
    assert caught.value is stop and ran == ["settle", "metrics", "hooks"]
    ran.clear()
    with pytest.raises(KeyboardInterrupt):
        close_all([lambda: ran.append("bar"), stopped("metrics", KeyboardInterrupt())], None)
    assert ran == ["bar", "metrics"]
