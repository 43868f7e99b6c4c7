"""A step whose gradient norm is not finite stops the run before its update, in one line naming
the step (`trainer.runner.optimizer_update`, the update SFT and GRPO share): no checkpoint
holds the weights it would make. A rate of 1e20 moves the tiny model's weights so far at
step 1 that step 2's forward overflows float32 and its gradients are NaN."""

from __future__ import annotations

import pytest

from mfsdp_ckpt.errors import EXIT_FAILED
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.optim import NonFiniteGradientError
from trainer.sft import run_sft

# three steps of 4 rows, saved each step, at a constant rate of 1e20 from step 1
DIVERGING = (
    "data.global_batch_size=4",
    "trainer.total_steps=3",
    "trainer.device=cpu",
    "checkpoint.save_every=1",
    "optim.lr=1e20",
    "optim.warmup_steps=0",
    "optim.scheduler=constant",
)


def test_a_nan_gradient_stops_the_run_before_its_update(tmp_path):
    rows = write_chat_jsonl(tmp_path / "train.jsonl", rows=8)
    cfg = tiny_config(rows, tmp_path / "run", *DIVERGING)
    with pytest.raises(NonFiniteGradientError) as caught:
        run_sft(cfg)
    assert str(caught.value) == "step 2: gradient norm is nan; stopping before the update"
    assert caught.value.exit_code == EXIT_FAILED
    saved = sorted(p.name for p in (tmp_path / "run").glob("global_step_*"))
    assert saved == ["global_step_1"]
