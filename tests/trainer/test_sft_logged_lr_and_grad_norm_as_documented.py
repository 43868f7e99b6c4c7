"""What an SFT step logs as `train/lr` and `train/grad_norm`, as docs/sft.md says it.

`train/lr` is the rate the step's update used: 0 at step 1 of a warmup, where verl's SFT
trainers log the rate after `lr_scheduler.step()` (the next step's: their curve is the same
one shifted by one step). `train/grad_norm` is the norm before clipping, as verl's. Nothing
said either, so a user overlaying verl's curves saw a one-step shift without a reason.
"""

from __future__ import annotations

from tests.support.metrics import read_metrics
from tests.support.paths import REPO
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.sft import run_sft

LR, CLIP = 1e-3, 1e-4  # a clip far below any gradient's norm here


def test_lr_is_this_updates_and_grad_norm_is_before_clipping(tmp_path):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=8)
    cfg = tiny_config(
        data,
        tmp_path / "run",
        "data.global_batch_size=4",
        "trainer.total_steps=2",
        "trainer.device=cpu",
        f"optim.lr={LR}",
        "optim.min_lr=0",
        "optim.scheduler=constant",
        "optim.warmup_steps=1",
        f"optim.clip_grad={CLIP}",
    )
    run_sft(cfg)
    records = [record for record in read_metrics(tmp_path / "run") if "train/lr" in record]
    # the first update's warmup rate (0), then the full rate: verl logs LR, LR
    assert [record["train/lr"] for record in records] == [0.0, LR]
    assert all(record["train/grad_norm"] > 100 * CLIP for record in records)


def test_docs_say_what_lr_and_grad_norm_are():
    text = " ".join((REPO / "docs" / "sft.md").read_text().split())
    assert "`train/lr` is the learning rate the step's update used" in text
    assert "which is the next step's, so their lr curve is the same one shifted by one step" in text
    assert "`train/grad_norm` is the global gradient norm before clipping" in text
    assert "or a number (verl's SFT dataset refuses it too" in text
