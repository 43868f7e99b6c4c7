"""The vLLM the engine needs and the temperatures vLLM samples at, judged without vLLM: a
config that vLLM would refuse at the first step, after the models are built, is refused as
it is checked (exit 2, naming the key); a vLLM too old is named with the version it needs."""

import pytest

from trainer.config import ConfigError, load_config
from trainer.grpo.config import GRPOConfig
from trainer.rollout.vllm_limits import (
    VLLM_MIN_VERSION,
    vllm_version_refusal,
)


@pytest.mark.parametrize("found", [VLLM_MIN_VERSION, "0.32.0+cpu", "0.33.1", "1.0.0rc1", "x"])
def test_a_vllm_the_engine_runs_on_passes(found):
    assert vllm_version_refusal(found) is None


@pytest.mark.parametrize("found", ["0.10.0", "0.31.9", "0.31.9.dev12+g1234"])
def test_an_older_vllm_is_named_with_the_version_needed(found):
    assert vllm_version_refusal(found) == (
        f"vLLM {found} found, mfsdp needs >= {VLLM_MIN_VERSION} (pip install -U vllm)"
    )


def test_a_temperature_vllm_refuses_is_refused_as_the_config_loads():
    with pytest.raises(ConfigError, match=r"^rollout.temperature=3: vLLM samples only in \[0, 2\]"):
        load_config(GRPOConfig, overrides=["rollout.name=vllm", "rollout.temperature=3"])
    # the hf engine samples at any temperature; vLLM up to 2
    assert load_config(GRPOConfig, overrides=["rollout.name=hf", "rollout.temperature=3"])
    assert load_config(GRPOConfig, overrides=["rollout.name=vllm", "rollout.temperature=2"])
