"""A step whose batch holds only rows that train no token showed `loss=0.0000`, read as a
perfect fit; it has no loss, and its line says so (the step still runs, as verl's does)."""

from __future__ import annotations

from trainer.metrics import bar_postfix

RECORD = {
    "train/loss": 0.0,
    "train/lr": 1e-4,
    "train/grad_norm": 0.0,
    "train/loss_tokens": 0,
    "perf/tokens_per_s": 100.0,
}


def test_a_batch_without_target_tokens_shows_no_loss():
    assert bar_postfix(RECORD)["loss"] == "- (no target tokens)"


def test_a_batch_with_targets_shows_its_loss():
    assert bar_postfix({**RECORD, "train/loss": 0.25, "train/loss_tokens": 7})["loss"] == "0.2500"
