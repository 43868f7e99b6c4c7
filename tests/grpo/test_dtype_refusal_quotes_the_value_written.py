"""A refused dtype key quotes the value as the user wrote it: `rollout.dtype=half` was refused
as "got fp16", the alias it is read as (`bfloat16`, `float32` ... are read as mfsdp's short
names before the check), a value the user never wrote."""

import pytest

from trainer.config import ConfigError, load_config
from trainer.grpo.config import GRPOConfig


@pytest.mark.parametrize("key", ["rollout.dtype", "strategy.mixed_precision"])
@pytest.mark.parametrize("written", ["half", "float16", "torch.float16", "Float64"])
def test_a_refused_dtype_is_quoted_as_written(key, written):
    with pytest.raises(ConfigError) as caught:
        load_config(GRPOConfig, None, [f"{key}={written}"])
    assert str(caught.value) == (
        f"command-line override: config key '{key}' expects one of auto | bf16 | fp32,"
        f" got {written}"
    )


def test_an_alias_of_an_accepted_dtype_is_read_as_it():
    cfg = load_config(
        GRPOConfig, None, ["rollout.dtype=bfloat16", "strategy.mixed_precision=float"]
    )
    assert (cfg.rollout.dtype, cfg.strategy.mixed_precision) == ("bf16", "fp32")
