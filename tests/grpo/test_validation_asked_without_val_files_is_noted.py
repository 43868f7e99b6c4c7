"""`trainer.val_before_train=true` or `trainer.eval_every` (verl's `test_freq`) with no
`data.val_files` validates nothing: it passed `config check` and trained without a word."""

from __future__ import annotations

import logging

import pytest

from trainer.config import load_config
from trainer.grpo.config import GRPOConfig, note_validation_unread


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["trainer.val_before_train=true"], "trainer.val_before_train=true"),
        (["trainer.test_freq=5"], "trainer.eval_every=5"),
        (
            ["trainer.val_before_train=true", "trainer.eval_every=2"],
            "trainer.val_before_train=true and trainer.eval_every=2",
        ),
    ],
)
def test_validation_asked_without_val_files_gets_one_note(overrides, named, caplog):
    config = load_config(GRPOConfig, None, overrides)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"):
        note_validation_unread(config)
    assert [r.getMessage() for r in caplog.records] == [
        f"note: {named} without data.val_files: nothing is validated; give data.val_files"
    ]


@pytest.mark.parametrize(
    "overrides",
    [[], ["data.val_files=[v.parquet]", "trainer.val_before_train=true", "trainer.eval_every=2"]],
)
def test_no_note_without_validation_asked_or_with_val_files(overrides, caplog):
    config = load_config(GRPOConfig, None, overrides)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"):
        note_validation_unread(config)
    assert not caplog.records
