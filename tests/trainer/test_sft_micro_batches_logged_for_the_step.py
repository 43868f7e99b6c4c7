"""SFT's `train/micro_batches` is the step's count of micro-batches holding rows, all ranks
together, as `train/tokens` beside it is the step's. It was rank 0's own count, with the
empty filler micro-batches each rank adds to keep in step with the busiest: 7 rows in padded
micro-batches of 3 logged 3 on one rank and 2 on two ranks (their shares of 4 and 3 rows
make 2 + 1)."""

from __future__ import annotations

from pathlib import Path

from tests.support.distributed import run_distributed
from tests.support.metrics import read_metrics
from tests.support.paths import REPO
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.sft import run_sft

SETTINGS = (
    "trainer.total_steps=1",
    "data.global_batch_size=7",
    "data.packing=false",
    "data.micro_batch_size=3",
)


def _train(rank: int, world_size: int, root: str) -> None:
    run_sft(tiny_config(Path(root) / "train.jsonl", Path(root) / "run", *SETTINGS))


def test_two_ranks_log_the_steps_micro_batches(tmp_path):
    write_chat_jsonl(tmp_path / "train.jsonl", rows=7)
    run_distributed(_train, 2, str(tmp_path))
    (record,) = [r for r in read_metrics(tmp_path / "run") if "train/loss" in r]
    assert record["train/micro_batches"] == 3


def test_docs_say_what_micro_batches_counts():
    text = " ".join((REPO / "docs" / "sft.md").read_text().split())
    assert (
        "`train/micro_batches` is the step's count of micro-batches holding rows, all ranks" in text
    )
