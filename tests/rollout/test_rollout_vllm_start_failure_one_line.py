"""vLLM failing as its engine starts (here its KV cache asking for more memory than the machine
has: VLLM_CPU_KVCACHE_SPACE, which the run leaves to the user) is one error naming the engine,
vLLM's reason and rollout.name=hf, exit 1, as a failed generate is: it was vLLM's 112-line
traceback, after the actor and the reference had been built."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.paths import repo_env
from trainer.rollout.vllm_engine import vllm_available

pytestmark = pytest.mark.skipif(
    not vllm_available(), reason="vLLM is not installed (scripts/install_vllm_cpu.sh)"
)

# The engine built as a GRPO run builds it, in a process group as a run's is.
_RUN = """
import sys
from pathlib import Path
import torch
from transformers import Qwen2Config
from mfsdp_ckpt.errors import MfsdpError
from trainer.distributed import distributed_run
from trainer.rollout.build import build_rollout_engine
from trainer.tiny import build_tokenizer

tok = build_tokenizer()
config = Qwen2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=64,
    num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
    max_position_embeddings=128, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)

def write_assets(folder):
    config.save_pretrained(folder)
    tok.save_pretrained(folder)

try:
    with distributed_run("cpu"):
        build_rollout_engine("vllm", hf_config=config, tokenizer=tok, model_path=None,
            assets_dir=Path(sys.argv[1]), write_assets=write_assets,
            device=torch.device("cpu"), dtype=torch.float32, max_model_len=64, seed=0,
            enforce_eager=True)
except MfsdpError as err:
    print(f"error: {err}")
    sys.exit(err.exit_code)
"""


def test_an_engine_that_fails_to_start_is_one_error(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", _RUN, str(tmp_path / "assets")],
        capture_output=True,
        text=True,
        env={**repo_env(), "OMP_NUM_THREADS": "1", "VLLM_CPU_KVCACHE_SPACE": "100000"},
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    line = done.stdout.strip()
    assert line.startswith("error: rollout vllm (rollout.name=vllm, or auto"), line
    assert "vLLM failed to start: " in line and "100000" in line, line
    assert line.endswith("use rollout.name=hf (the transformers engine)"), line
    assert "\n" not in line and "Traceback" not in done.stderr, done.stderr[-3000:]
