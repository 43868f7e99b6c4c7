"""Every SFT config value that no run can use is refused where the config is loaded
(`load_config`, which `mfsdp train sft` runs in the launcher, in every rank and on every
resume), naming its key: the SFT runner no longer checks them a second time."""

from __future__ import annotations

import pytest

from tests.support.paths import EXAMPLES
from trainer.config import ConfigError, SFTConfig, load_config

CASES = {
    "batch": (["data.global_batch_size=0"], "'data.global_batch_size' must be > 0, got 0"),
    "val_ratio": (["data.val_ratio=1"], "'data.val_ratio' must be in [0, 1), got 1"),
    "log_every": (["trainer.log_every=0"], "'trainer.log_every' must be > 0, got 0"),
    "packed_budget": (
        ["data.packing=true", "data.max_length=64", "data.max_tokens_per_micro_batch=40"],
        "data.max_tokens_per_micro_batch=40 < data.max_length=64",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_refused_when_loaded_naming_the_key(case):
    overrides, says = CASES[case]
    with pytest.raises(ConfigError) as refused:
        load_config(SFTConfig, EXAMPLES / "sft_tiny_cpu.yaml", overrides)
    assert says in str(refused.value) and "\n" not in str(refused.value), str(refused.value)
