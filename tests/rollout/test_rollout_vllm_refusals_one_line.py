"""What vLLM refuses comes back as the engine's one line naming the run's key or knob, never
as vLLM's traceback: a sampling setting its SamplingParams refuses (a temperature above 2 was
25 frames at step 1), a vLLM older than the engine's calls (an ImportError or a TypeError of
its API), and a KV cache too small for the run's length, whose line keeps vLLM's numbers and
names the knob that sizes the cache on the device (vLLM's own advice names
`gpu_memory_utilization`, which does nothing on CPU)."""

import pytest
import torch
from transformers import Qwen2Config

from mfsdp_ckpt.errors import EXIT_FAILED
from tests.support.rollout import build_cpu_engine
from trainer.rollout.base import SamplingParams
from trainer.rollout.build import start_failure
from trainer.rollout.vllm_engine import VLLMRolloutEngine, VLLMRolloutError, vllm_available
from trainer.rollout.vllm_limits import VLLM_MIN_VERSION

pytestmark = pytest.mark.skipif(
    not vllm_available(), reason="vLLM is not installed (scripts/install_vllm_cpu.sh)"
)

GIB = 1 << 30


def test_a_temperature_vllm_refuses_is_one_line_naming_the_key():
    # an engine whose vLLM never started: the settings are refused before it is called
    engine = VLLMRolloutEngine.__new__(VLLMRolloutEngine)
    engine.llm, engine.eos_token_ids, engine._seed = None, [2], 0
    with pytest.raises(VLLMRolloutError) as caught:
        engine.generate([[1, 2, 3]], SamplingParams(n=2, temperature=3.0, max_tokens=4))
    line = str(caught.value)
    assert "rollout.temperature" in line and "temperature must be in [0, 2]" in line, line
    assert "\n" not in line and caught.value.exit_code == EXIT_FAILED


def test_a_vllm_older_than_the_engine_needs_is_one_line(tmp_path, monkeypatch):
    import vllm

    monkeypatch.setattr(vllm, "__version__", "0.10.2")

    def write_assets(_target):
        raise AssertionError("an engine is started only with a vLLM it runs on")

    with pytest.raises(VLLMRolloutError) as caught:
        build_cpu_engine(
            "vllm",
            Qwen2Config(  # a shape vLLM's CPU attention runs (head_dim 32)
                vocab_size=64,
                hidden_size=64,
                intermediate_size=64,
                num_hidden_layers=1,
                num_attention_heads=2,
                num_key_value_heads=1,
            ),
            tmp_path / "rollout",
            write_assets,
        )
    assert f"vLLM 0.10.2 found, mfsdp needs >= {VLLM_MIN_VERSION}" in str(caught.value)


def _kv_cache_refusal() -> ValueError:
    """vLLM's own refusal of a KV cache of 0.99 GiB for a 32768-token request needing 1.75."""
    from vllm.v1.core.kv_cache_utils import _check_enough_kv_cache_memory

    try:
        _check_enough_kv_cache_memory(
            int(0.99 * GIB), lambda: int(1.75 * GIB), 32768, lambda _available: 18560
        )
    except ValueError as err:
        return err
    raise AssertionError("vLLM took a KV cache smaller than one request needs")


def test_a_kv_cache_refusal_keeps_its_numbers_and_names_the_cpu_knob(monkeypatch):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    line = str(start_failure(_kv_cache_refusal(), 32768, torch.device("cpu"), 0.9))
    assert "(0.99 GiB)" in line and "estimated maximum model length is 18560" in line, line
    assert "environment variable VLLM_CPU_KVCACHE_SPACE (GiB, now 1)" in line, line
    assert "gpu_memory_utilization" not in line, line
    assert "data.max_prompt_length + rollout.max_response_length (32768)" in line, line
    assert "…" not in line, line  # not cut


def test_a_kv_cache_refusal_on_a_gpu_names_the_run_key():
    line = str(start_failure(_kv_cache_refusal(), 32768, torch.device("cuda"), 0.5))
    assert "raise rollout.gpu_memory_utilization (now 0.5)" in line, line
    assert "VLLM_CPU_KVCACHE_SPACE" not in line, line
