"""A resume refused for placing steps on other data names the run's own config keys.

It said "checkpoint was trained with train_rows=100, this run has 90" (internal names) when
`data.val_ratio` changed; now it names the training rows and the keys that decide them, and
`data.global_batch_size` / `trainer.seed` for the others (GRPO's `data.train_batch_size`:
tests/grpo/test_grpo_resume_checks.py).
"""

from __future__ import annotations

import pytest

from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.resume import ResumeMismatchError
from trainer.sft import run_sft

SETTINGS = ("data.max_tokens_per_micro_batch=256", "trainer.total_steps=3")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("keys")
    data = write_chat_jsonl(root / "train.jsonl", rows=16)
    run = root / "run"
    run_sft(tiny_config(data, run, *SETTINGS, "data.global_batch_size=4", "trainer.stop_at_step=2"))
    return data, run


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            ("data.global_batch_size=8",),
            "checkpoint was trained with data.global_batch_size=4, this run has"
            " data.global_batch_size=8",
        ),
        (
            ("data.global_batch_size=4", "data.val_ratio=0.25"),
            "checkpoint was trained on 16 training rows, this run has 12 (data.train_files,"
            " data.val_ratio decide them)",
        ),
        (
            ("data.global_batch_size=4", "trainer.seed=7"),
            "checkpoint was trained with trainer.seed=0, this run has trainer.seed=7",
        ),
    ],
    ids=["batch", "rows", "seed"],
)
def test_the_refusal_names_the_config_keys(saved, overrides, expected):
    data, run = saved
    with pytest.raises(ResumeMismatchError) as refused:
        run_sft(tiny_config(data, run, *SETTINGS, *overrides))
    assert str(refused.value) == (
        f"{run}/global_step_2/dist_ckpt: {expected}; steps would map to different data (use a"
        " new trainer.run_dir to start over)"
    )
