"""The fused token picker (pick_kernel's Triton kernels) on a GPU: what the eager ops choose,
from bf16 decode-graph logits.

Run on a GPU machine: pytest -m gpu tests/rollout/test_rollout_fused_sampling_gpu.py
"""

import copy

import pytest
import torch

from tests.support.rollout import GPU_ONLY, PROMPTS, perturbed_model
from trainer.rollout import hf
from trainer.rollout.base import SamplingParams
from trainer.rollout.fused_sampling import TokenPicker
from trainer.rollout.hf import HFRolloutEngine
from trainer.rollout.sampling import chosen_logprob, sample_next
from trainer.tiny import build_tiny_model_dir

pytestmark = GPU_ONLY
BATCH_ROWS, VOCAB = 256, 151936  # qwen2-1.5b's rollout benchmark


@pytest.mark.parametrize("temperature", [0.0, 1.0, 0.7])
def test_fused_equals_eager_at_qwen_shapes(temperature):
    """bf16 logits for the fused picker, their fp32 copy for the eager ops (as the decode
    graph hands each of them today), all rows and a compacted subset of them."""
    params = SamplingParams(temperature=temperature, logprobs=True)
    picker = TokenPicker(fused=True)
    seeded = torch.Generator(device="cuda").manual_seed(0)
    logits = (torch.randn(BATCH_ROWS, VOCAB, device="cuda", generator=seeded) * 4).bfloat16()
    kept = torch.randperm(BATCH_ROWS, device="cuda", generator=seeded)[: BATCH_ROWS // 2]
    for rows in (None, kept):
        subset = logits if rows is None else logits[rows]
        chosen, logprob = picker(
            subset, params, torch.Generator(device="cuda").manual_seed(1), rows, BATCH_ROWS
        )
        expected = sample_next(
            subset.float(), params, torch.Generator(device="cuda").manual_seed(1), rows, 256
        )
        assert torch.equal(chosen, expected)
        torch.testing.assert_close(
            logprob, chosen_logprob(subset.float(), expected), atol=1e-5, rtol=0
        )
    assert picker.fused  # the kernel, no fallback


@pytest.fixture(scope="module")
def half_model(tmp_path_factory):
    model_dir = build_tiny_model_dir(tmp_path_factory.mktemp("tiny"), with_weights=True)
    return copy.deepcopy(perturbed_model(model_dir, 0, "cuda")).to(torch.bfloat16)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_engine_fused_equals_eager(half_model, temperature, monkeypatch):
    """bf16 model, CUDA graphs, rows dropped at every step: the fused picker reading the
    graph's bf16 logits gives the eager picker's responses and log-probs."""
    monkeypatch.setattr(hf, "EOS_CHECK_EVERY", 1)
    params = SamplingParams(n=4, temperature=temperature, max_tokens=64, seed=2, logprobs=True)
    free = HFRolloutEngine(half_model, [], 0, fused_sampling=False)
    eos = sorted({t[9] for t in free.generate(PROMPTS * 3, params).token_lists()[::5]})
    results = []
    for fused in (False, True):
        engine = HFRolloutEngine(half_model, eos, 0, fused_sampling=fused)
        results.append(engine.generate(PROMPTS * 3, params))
        graphs = engine.decoder._state["graphs"]
        assert engine.decoder.cuda_graphs and engine.pick.fused == fused
        assert graphs.logits.dtype == (torch.bfloat16 if fused else torch.float32)
    eager, fused = results
    assert min(eager.lengths()) < 64
    assert eager.token_lists() == fused.token_lists()
    torch.testing.assert_close(fused.logprobs, eager.logprobs, atol=1e-5, rtol=0)
