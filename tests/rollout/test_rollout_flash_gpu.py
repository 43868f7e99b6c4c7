"""Decode attention kernels (split-KV Triton, FlashAttention-2) and dropped rows on a GPU: CUDA
graphs per row count, vs transformers.

Run on a GPU machine: pytest -m gpu tests/rollout/test_rollout_flash_gpu.py
"""

import copy

import pytest
import torch

from tests.support.rollout import GPU_ONLY, reference_logprobs
from tests.support.rollout import PROMPTS as BASE_PROMPTS
from trainer.rollout import flash_decode, hf
from trainer.rollout.base import SamplingParams
from trainer.rollout.decode_ops import masked_softmax
from trainer.rollout.hf import HFRolloutEngine
from trainer.rollout.static_cache import _attend

pytestmark = GPU_ONLY
PROMPTS = BASE_PROMPTS * 3


@pytest.mark.parametrize("kernel", flash_decode.KERNELS)
@pytest.mark.parametrize("shape", [(4, 2, 32), (12, 2, 128), (8, 8, 64)])  # tiny, qwen2-1.5b, MHA
def test_decode_kernel_check_passes(shape, kernel):
    heads, kv_heads, dim = shape

    def matmul(q, keys, values, mask):
        return _attend(q, keys, values, mask, dim**-0.5, masked_softmax)

    cuda = torch.device("cuda")
    assert flash_decode.check(cuda, torch.bfloat16, heads, kv_heads, dim, matmul, kernel) is None


def _row_counts(engine) -> set[int]:
    return {rows for graphs in engine.decoder._graphs.values() for rows, _ in graphs.by_shape}


def _ending_run(engine, params, monkeypatch, check_every: int = 1):
    """`params` generations where rows end early, at different steps: a token from each
    even row of a free run (its 6th, 13th, 20th, ... for rows 0, 2, 4, ...) ends a sequence,
    so rows are dropped while others go on."""
    monkeypatch.setattr(hf, "EOS_CHECK_EVERY", check_every)
    engine.eos_token_ids = []
    free = engine.generate(PROMPTS, params).token_lists()
    picks = [(tokens, 5 + 7 * i) for i, tokens in enumerate(free[::2])]
    engine.eos_token_ids = sorted({tokens[at] for tokens, at in picks if at < len(tokens)})
    return engine.generate(PROMPTS, params)


def test_graph_decode_with_dropped_rows_same_as_without(model, monkeypatch):
    """fp32, matmul attention: with rows dropped at every step, or never, the same responses."""
    for params in (
        SamplingParams(temperature=0, max_tokens=48, logprobs=True),
        SamplingParams(n=2, max_tokens=48, seed=3, logprobs=True),
    ):
        engine = HFRolloutEngine(model, [], 0, cuda_graphs=True, attention="matmul")
        dropped = _ending_run(engine, params, monkeypatch)
        assert len(_row_counts(engine)) > 1 and engine.decoder.cuda_graphs
        kept = _ending_run(engine, params, monkeypatch, check_every=10**6)
        assert dropped.token_lists() == kept.token_lists()
        assert min(dropped.lengths()) < 48
        torch.testing.assert_close(dropped.logprobs, kept.logprobs, atol=1e-4, rtol=0)


def test_kernel_graph_decode_with_dropped_rows_matches_transformers(model, monkeypatch):
    """bf16: the split-KV and FlashAttention kernels' log-probs are as close to an fp32
    forward as the matmul attention's."""
    half = copy.deepcopy(model).to(torch.bfloat16)
    params = SamplingParams(n=2, max_tokens=200, seed=5, logprobs=True)
    errors = {}
    for attention in (*flash_decode.KERNELS, "matmul"):
        engine = HFRolloutEngine(half, [], 0, cuda_graphs=True, attention=attention)
        out = _ending_run(engine, params, monkeypatch)
        assert engine.decoder.kernel == attention and engine.decoder.cuda_graphs
        assert len(_row_counts(engine)) > 1 and min(out.lengths()) < 200
        spans = {span for g in engine.decoder._graphs.values() for _, span in g.by_shape}
        assert attention == "matmul" or spans == {256}, spans  # kernels: a graph per row count
        errors[attention] = max(
            float(
                (
                    out.logprobs[row, : len(response)]
                    - reference_logprobs(model, PROMPTS[out.prompt_index[row]], response)
                )
                .abs()
                .max()
            )
            for row, response in enumerate(out.token_lists())
        )
    assert HFRolloutEngine(half, [], 0).decoder.kernel == "split"  # the default on a GPU in bf16
    for kernel in flash_decode.KERNELS:
        assert errors[kernel] <= 2 * errors["matmul"] + 0.02, errors
