"""`trainer.val_before_train=true` validates a resumed run too, at the step it resumes, as
verl's `fit` validates after loading its checkpoint whatever the step: it ran only at step 0,
so a resumed run's first validation came steps later, or never. That validation is merged
into the record of the step the earlier run logged, in metrics.jsonl and in TensorBoard
(each step once: it was a second record of the step); a rerun with nothing left to train
validates nothing and logs nothing (it validated, logged the last step again and rewrote
its validation dump, every time)."""

from __future__ import annotations

from tests.grpo.test_grpo_runner import _overrides, task  # noqa: F401  (task: a fixture)
from tests.support.metrics import read_metrics
from trainer.config import load_config
from trainer.grpo.config import GRPOConfig
from trainer.grpo.runner import run_grpo

QUIET = ["trainer.eval_every=0", "trainer.val_after_last_step=false", "checkpoint.save_every=1"]


def _steps_of(run, key: str) -> list[int]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    return [event.step for event in events.Scalars(key)]


def test_a_resumed_run_validates_before_its_first_step_into_that_steps_record(task):  # noqa: F811
    root, files, reward = task
    run = root / "resumed"
    base = [
        *_overrides(root, files, reward, "resumed", steps=2),
        *QUIET,
        "trainer.logger=[console,jsonl,tensorboard]",
    ]
    first = run_grpo(load_config(GRPOConfig, None, [*base, "trainer.stop_at_step=1"]))
    assert first.final_step == 1
    assert not [r for r in read_metrics(run) if "val/accuracy" in r]
    again = [*base, "trainer.val_before_train=true", f"trainer.validation_data_dir={root}/val"]
    second = run_grpo(load_config(GRPOConfig, None, again))
    assert second.resumed_from == 1 and second.final_step == 2
    records = read_metrics(run)
    assert [r["step"] for r in records] == [1, 2], records
    assert "reward/mean" in records[0] and "val/accuracy" in records[0], records
    assert _steps_of(run, "reward/mean") == [1, 2]
    assert _steps_of(run, "val/accuracy") == [1]

    logged, events = (run / "metrics.jsonl").read_bytes(), sorted((run / "tensorboard").iterdir())
    dumped = sorted((root / "val").iterdir())
    dumps = [(path, path.stat().st_mtime_ns) for path in dumped]
    third = run_grpo(load_config(GRPOConfig, None, again))  # nothing left to train
    assert third.final_step == 2 and not third.val_accuracy
    assert (run / "metrics.jsonl").read_bytes() == logged
    assert sorted((run / "tensorboard").iterdir()) == events
    assert [(path, path.stat().st_mtime_ns) for path in sorted((root / "val").iterdir())] == dumps
