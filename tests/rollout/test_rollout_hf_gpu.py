"""The hf engine's CUDA-graph decode on a GPU: same tokens and log-probs as transformers (fp32).

Run on a GPU machine: pytest -m gpu tests/rollout/test_rollout_hf_gpu.py
"""

import copy
import importlib

import pytest
import torch

from tests.support.rollout import GPU_ONLY, reference_logprobs
from tests.support.rollout import PROMPTS as BASE_PROMPTS
from trainer.rollout import static_cache
from trainer.rollout.base import SamplingParams
from trainer.rollout.hf import HFRolloutEngine

pytestmark = GPU_ONLY
PROMPTS = BASE_PROMPTS * 3


def test_cuda_graph_decode_matches_transformers(model):
    engine = HFRolloutEngine(model, eos_token_ids=[2], pad_token_id=0, cuda_graphs=True)
    for _ in range(2):  # the second call replays the graph captured by the first
        out = engine.generate(PROMPTS, SamplingParams(n=2, max_tokens=24, seed=5, logprobs=True))
        for row, response in enumerate(out.token_lists()):
            expected = reference_logprobs(model, PROMPTS[out.prompt_index[row]], response)
            torch.testing.assert_close(
                out.logprobs[row, : len(response)], expected, atol=1e-4, rtol=0
            )
    assert engine.decoder.cuda_graphs and engine.decoder._graphs, (
        "graph capture fell back to eager decoding"
    )
    eager = HFRolloutEngine(model, eos_token_ids=[2], pad_token_id=0, cuda_graphs=False)
    greedy = SamplingParams(temperature=0, max_tokens=24)
    assert (
        engine.generate(PROMPTS, greedy).token_lists()
        == eager.generate(PROMPTS, greedy).token_lists()
    )
    for prompt in PROMPTS[:3]:
        ref = model.generate(
            torch.tensor([prompt], device="cuda"),
            max_new_tokens=24,
            do_sample=False,
            eos_token_id=2,
            pad_token_id=0,
        )
        assert engine.generate([prompt], greedy).token_lists()[0] == ref[0, len(prompt) :].tolist()


def test_cuda_graphs_per_attention_span_match_transformers(model):
    """Long responses cross several 128-slot spans, each decoded by its own captured graph."""
    engine = HFRolloutEngine(model, eos_token_ids=[], pad_token_id=0, cuda_graphs=True)
    out = engine.generate(PROMPTS[:3], SamplingParams(n=2, max_tokens=300, seed=11, logprobs=True))
    for row, response in enumerate(out.token_lists()):
        assert len(response) == 300
        expected = reference_logprobs(model, PROMPTS[out.prompt_index[row]], response)
        torch.testing.assert_close(out.logprobs[row], expected, atol=1e-4, rtol=0)
    spans = sorted(span for g in engine.decoder._graphs.values() for _, span in g.by_shape)
    assert engine.decoder.cuda_graphs and spans == [128, 256, 384], spans


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decode_graphs_run_the_triton_kernels(model, dtype):
    """Each of static_cache.TRITON_OPS passes its check here and is in the graphs' ops (a
    kernel that failed its check would leave the compiled op and a warning, silently slower)."""
    typed = copy.deepcopy(model).to(dtype)
    decoder = HFRolloutEngine(typed, eos_token_ids=[2], pad_token_id=0).decoder
    for op, module_name in static_cache.TRITON_OPS:
        module = importlib.import_module(f"trainer.rollout.{module_name}")
        assert getattr(decoder.graph_ops, op) is getattr(module, op), (op, dtype)
