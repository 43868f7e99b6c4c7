"""An SFT `data.val_ratio` that holds out every training row (0.9 of 3 rows rounds to 3) is
refused naming the setting and the row counts, by train's loader and by `mfsdp config check`:
the run failed on "data.global_batch_size=1 exceeds the 0 training rows", blaming the batch
size of a file that has rows, and the check said ok. A ratio that leaves a row trains, and the
check reads no more rows than it takes to know that."""

from __future__ import annotations

import pytest

from cli.config_check import check_config
from mfsdp_ckpt.errors import MfsdpError
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.data.sft_dataset import load_sft_splits
from trainer.data.val_split import check_val_split
from trainer.tiny import build_tokenizer


@pytest.mark.parametrize("rows, ratio, held", [(3, 0.9, 3), (1, 0.1, 1), (20, 0.98, 20)])
def test_a_hold_out_of_every_row_is_refused_by_train_and_check(tmp_path, rows, ratio, held):
    data = write_chat_jsonl(tmp_path / "chat.jsonl", rows=rows)
    line = (
        f"data.val_ratio={ratio:g} holds out {held} of the {rows} rows of data.train_files"
        f" ({data}), leaving none to train on: lower it or give data.val_files"
    )
    cfg = tiny_config(data, tmp_path / "run", f"data.val_ratio={ratio}")
    with pytest.raises(MfsdpError) as trained:
        load_sft_splits(cfg.data, build_tokenizer(), seed=0, progress=False)
    given = [f"data.train_files={data}", f"data.val_ratio={ratio}", "trainer.device=cpu"]
    with pytest.raises(MfsdpError) as checked:
        check_config("sft", None, given)
    assert [str(trained.value), str(checked.value), checked.value.exit_code] == [line, line, 2]


def test_a_hold_out_that_leaves_a_row_trains(tmp_path):
    data = write_chat_jsonl(tmp_path / "chat.jsonl", rows=3)
    cfg = tiny_config(data, tmp_path / "run", "data.val_ratio=0.5")
    check_val_split(cfg.data)
    train, val = load_sft_splits(cfg.data, build_tokenizer(), seed=0, progress=False)
    assert (len(train), len(val)) == (1, 2)


def test_the_check_reads_only_the_rows_that_decide(tmp_path):
    """0.9 leaves a row from 7 rows on: a file whose 8th line is no JSON passes the check
    (train refuses that line), so a large file is never read whole."""
    data = write_chat_jsonl(tmp_path / "chat.jsonl", rows=7)
    with open(data, "a") as handle:
        handle.write("{not json\n")
    check_val_split(tiny_config(data, tmp_path / "run", "data.val_ratio=0.9").data)
