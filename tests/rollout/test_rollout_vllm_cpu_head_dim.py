"""A model shape vLLM's CPU attention lacks is refused in one line before the engine starts
(vLLM itself found out at the first generate, in a traceback, after everything was built)."""

import pytest
from transformers import Qwen2Config

from mfsdp_ckpt.errors import EXIT_FAILED
from tests.support.rollout import build_cpu_engine
from trainer.rollout.vllm_engine import VLLMRolloutError, vllm_available

pytestmark = pytest.mark.skipif(
    not vllm_available(), reason="vLLM is not installed (scripts/install_vllm_cpu.sh)"
)


def _build(tmp_path, **shape):
    config = Qwen2Config(vocab_size=64, intermediate_size=64, num_hidden_layers=1, **shape)

    def write_assets(_target):
        raise AssertionError("the engine's model dir is written only for a shape it runs")

    return build_cpu_engine("vllm", config, tmp_path / "rollout", write_assets)


@pytest.mark.parametrize(
    "shape, head_dim",
    [
        (dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2), 16),
        (dict(hidden_size=64, num_attention_heads=2, head_dim=8), 8),
    ],
)
def test_head_dim_vllm_cpu_lacks_is_one_line_naming_the_way_on(tmp_path, shape, head_dim):
    with pytest.raises(VLLMRolloutError) as caught:
        _build(tmp_path, **shape)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("rollout vllm (rollout.name=vllm, or auto")
    assert f"head_dim={head_dim}" in message
    assert message.endswith("use rollout.name=hf (the transformers engine)")
    assert caught.value.exit_code == EXIT_FAILED
    assert not (tmp_path / "rollout").exists()  # refused before vLLM's model dir is written
