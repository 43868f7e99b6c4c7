"""A run whose TensorBoard writes fail mid-run (a full disk where its event file lies) ends
as a full metrics log does: exit 1, one line naming RUN/tensorboard and the checkpoint to
resume from, no traceback of the writer's thread. Was: the thread's traceback, then a bare
`error: No space left on device`, because closing the writer in the run's `finally` raised
the error again and replaced the line that named the checkpoint."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

from click.testing import CliRunner

from cli.main import app
from tests.reliability.sft_run import sft_args
from tests.support.sft import write_chat_jsonl
from trainer.closing import close_all
from trainer.metrics import METRICS_FILE, TENSORBOARD_DIR, last_logged_step
from trainer.tracker_threads import started_watched


def _break_event_file_after_a_save(run: Path, stop: threading.Event) -> None:
    """Once step 2 (saved) is logged, a directory takes the place of the run's TensorBoard
    event file: the writer opens it again for each record it appends, and fails there."""
    while not stop.is_set():
        events = sorted((run / TENSORBOARD_DIR).glob("events.out.tfevents.*"))
        if events and (last_logged_step(run, 0) or 0) >= 2:
            events[0].unlink()
            events[0].mkdir()
            return
        time.sleep(0.001)


def test_a_failed_tensorboard_write_ends_the_run_with_the_resume_line(tmp_path, monkeypatch):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=24)
    run = tmp_path / "run"
    printed: list[threading.ExceptHookArgs] = []
    monkeypatch.setattr(threading, "excepthook", printed.append)  # what would reach stderr
    stop = threading.Event()
    breaker = threading.Thread(target=_break_event_file_after_a_save, args=(run, stop))
    breaker.start()
    try:
        args = sft_args(data, run, "trainer.total_steps=12", "checkpoint.save_every=2")
        result = CliRunner().invoke(app, [*args, "trainer.tensorboard=true"])
    finally:
        stop.set()
        breaker.join()
    last = result.output.strip().splitlines()[-1]
    assert re.fullmatch(
        rf"error: {re.escape(str(run / TENSORBOARD_DIR))}/events\.out\.tfevents\.\S+: Is a"
        rf" directory; the newest checkpoint is {re.escape(str(run))}/global_step_\d+: run the"
        " same command again to resume from it",
        last,
    ), result.output
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert printed == []  # the writer's thread died quietly: its failure is the line above
    assert (run / METRICS_FILE).is_file()


def test_a_failed_close_never_replaces_the_failure_in_flight():
    """Every closer runs; with a failure in flight theirs are dropped, without it the first
    of theirs is raised."""
    ran: list[str] = []

    def failing(name: str):
        def close() -> None:
            ran.append(name)
            raise OSError(28, "No space left on device")

        return close

    close_all([failing("a"), failing("b")], ValueError("the step failed"))
    assert ran == ["a", "b"]
    ran.clear()
    try:
        close_all([failing("a"), lambda: ran.append("c")], None)
    except OSError as err:
        assert err.strerror == "No space left on device"
    else:
        raise AssertionError("a close failing after a run that went well must fail it")
    assert ran == ["a", "c"]


def test_only_the_writers_threads_fail_quietly(monkeypatch):
    """A thread the writer started keeps its failure for the logger to raise; any other
    thread's failure still reaches the hook that was there."""
    printed: list[threading.ExceptHookArgs] = []
    monkeypatch.setattr(threading, "excepthook", printed.append)
    go = threading.Event()

    def fail(words: str) -> None:
        go.wait()
        raise OSError(28, words)

    writers = threading.Thread(target=fail, args=("the writer's",))
    _started, watch = started_watched(writers.start)
    other = threading.Thread(target=fail, args=("another's",))
    other.start()
    go.set()
    writers.join()
    other.join()
    assert isinstance(watch.failure, OSError) and watch.failure.strerror == "the writer's"
    assert [str(args.exc_value) for args in printed] == ["[Errno 28] another's"]
