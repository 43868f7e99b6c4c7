"""`data.max_tokens_per_micro_batch` below `data.max_length` with packing (no full-length row
fits a micro-batch) is a contradiction of two keys, refused with the config's other ones:
before any rank is launched or torch loads."""

from __future__ import annotations

import pytest

from tests.support.cli_errors import one_error
from tests.support.fresh_python import mfsdp
from tests.support.paths import EXAMPLES
from tests.support.sft import write_chat_jsonl
from trainer.config import ConfigError, SFTConfig, load_config


def test_refused_by_the_config_check(tmp_path):
    overrides = ["data.packing=true", "data.max_length=64", "data.max_tokens_per_micro_batch=40"]
    with pytest.raises(ConfigError, match=r"max_tokens_per_micro_batch=40 < data.max_length=64"):
        load_config(SFTConfig, EXAMPLES / "sft_tiny_cpu.yaml", overrides)
    padded = load_config(
        SFTConfig, EXAMPLES / "sft_tiny_cpu.yaml", ["data.packing=false", *overrides[1:]]
    )
    assert padded.data.max_tokens_per_micro_batch == 40  # unused without packing


def test_refused_before_the_ranks_launch(tmp_path):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    done = mfsdp(
        "train", "sft", "--config", str(EXAMPLES / "sft_tiny_cpu.yaml"), "--nproc-per-node", "2",
        f"data.train_files={data}", f"trainer.run_dir={tmp_path / 'run'}", "data.packing=true",
        "data.max_length=64", "data.max_tokens_per_micro_batch=40",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    one_error(done.stderr, "data.max_tokens_per_micro_batch=40 < data.max_length=64")
    assert "launching" not in done.stderr and "loading torch" not in done.stderr
