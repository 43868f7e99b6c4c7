"""vLLM failing as its engine starts (here its KV cache asking for more memory than the machine
has: VLLM_CPU_KVCACHE_SPACE, which the run leaves to the user) is one error naming the engine,
vLLM's reason and rollout.name=hf, exit 1, as a failed generate is: it was vLLM's 112-line
traceback, after the actor and the reference had been built."""

from __future__ import annotations

import pytest

from tests.support.vllm_process import engine_run, one_engine_error, tiny_qwen
from trainer.rollout.vllm_engine import vllm_available

pytestmark = pytest.mark.skipif(
    not vllm_available(), reason="vLLM is not installed (scripts/install_vllm_cpu.sh)"
)

# The engine built as a GRPO run builds it.
_BUILD = """
from pathlib import Path
import torch
from trainer.rollout.build import build_rollout_engine

def write_assets(folder):
    config.save_pretrained(folder)
    tok.save_pretrained(folder)

build_rollout_engine("vllm", hf_config=config, tokenizer=tok, model_path=None,
    assets_dir=Path(sys.argv[1]), write_assets=write_assets,
    device=torch.device("cpu"), dtype=torch.float32, max_model_len=64, seed=0,
    enforce_eager=True)
"""


def test_an_engine_that_fails_to_start_is_one_error(tmp_path):
    done = engine_run(
        tiny_qwen(heads=2, kv_heads=1),
        _BUILD,
        tmp_path / "assets",
        env={"VLLM_CPU_KVCACHE_SPACE": "100000"},
    )
    one_engine_error(done, "vLLM failed to start: ", "100000")
