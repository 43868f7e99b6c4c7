"""`trainer.val_before_train=true` validates a resumed run too, at the step it resumes, as
verl's `fit` validates after loading its checkpoint whatever the step: it ran only at step 0,
so a resumed run's first validation came steps later, or never."""

from __future__ import annotations

from tests.grpo.test_grpo_runner import _overrides, task  # noqa: F401  (task: a fixture)
from tests.support.metrics import read_metrics
from trainer.config import load_config
from trainer.grpo.config import GRPOConfig
from trainer.grpo.runner import run_grpo

QUIET = ["trainer.eval_every=0", "trainer.val_after_last_step=false", "checkpoint.save_every=1"]


def test_a_resumed_run_validates_before_its_first_step(task):  # noqa: F811
    root, files, reward = task
    base = _overrides(root, files, reward, "resumed", steps=2) + QUIET
    first = run_grpo(load_config(GRPOConfig, None, [*base, "trainer.stop_at_step=1"]))
    assert first.final_step == 1
    assert not [r for r in read_metrics(root / "resumed") if "val/accuracy" in r]
    second = run_grpo(load_config(GRPOConfig, None, [*base, "trainer.val_before_train=true"]))
    assert second.resumed_from == 1 and second.final_step == 2
    records = [
        r for r in read_metrics(root / "resumed") if "val/accuracy" in r or "reward/mean" in r
    ]
    kinds = [("val" if "val/accuracy" in r else "train", r["step"]) for r in records]
    assert kinds == [("train", 1), ("val", 1), ("train", 2)], kinds
