"""vLLM failing inside a generate (here its CPU attention meeting a head size it lacks, the
engine started without the run's check) is one error naming the engine, vLLM's reason and
rollout.name=hf, and the engine is shut down then: its finalizer, run at exit after the run
had torn its process group down, printed a second traceback ("Invalid process group")."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.paths import repo_env
from trainer.rollout.vllm_engine import vllm_available

pytestmark = pytest.mark.skipif(
    not vllm_available(), reason="vLLM is not installed (scripts/install_vllm_cpu.sh)"
)

# A process as a run is: a process group, the engine in it, the group destroyed on the way out.
_RUN = """
import sys
from transformers import Qwen2Config, Qwen2ForCausalLM
from trainer.distributed import distributed_run
from trainer.rollout.base import SamplingParams
from trainer.rollout.vllm_engine import VLLMRolloutEngine, VLLMRolloutError
from trainer.tiny import build_tokenizer

tok = build_tokenizer()
config = Qwen2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=64,
    num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
    max_position_embeddings=128, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
Qwen2ForCausalLM(config).save_pretrained(sys.argv[1])
tok.save_pretrained(sys.argv[1])
try:
    with distributed_run("cpu"):
        engine = VLLMRolloutEngine(sys.argv[1], dtype="float32", max_model_len=64,
                                   enforce_eager=True)
        engine.generate([[1, 2, 3]], SamplingParams(temperature=0, max_tokens=4))
except VLLMRolloutError as err:
    print(f"error: {err}")
    sys.exit(err.exit_code)
"""


def test_a_failed_generate_is_one_error_and_no_finalizer_traceback(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", _RUN, str(tmp_path / "model")],
        capture_output=True,
        text=True,
        env={**repo_env(), "OMP_NUM_THREADS": "1"},
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    line = done.stdout.strip()
    assert line.startswith("error: rollout vllm (rollout.name=vllm, or auto"), line
    assert "vLLM failed to generate: Unsupported CPU attention configuration: head_dim=16" in line
    assert line.endswith("use rollout.name=hf (the transformers engine)")
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
