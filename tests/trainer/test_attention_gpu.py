"""The varlen kernel for packed rows against SDPA with the block-diagonal mask, on a GPU
(pytest -m gpu tests/trainer/test_attention_gpu.py): outputs and gradients within bf16 noise,
with and without a sliding-attention layer's window."""

from __future__ import annotations

import pytest
import torch

from trainer.attention import varlen_attention_forward
from trainer.data.batching import document_boundaries

pytestmark = pytest.mark.gpu


def _block_causal_mask(lengths: list[int], device, window: int | None) -> torch.Tensor:
    """Within each document, causal, and where `window` is set transformers' sliding window:
    key k for query q where q - k < window."""
    doc = torch.repeat_interleave(
        torch.arange(len(lengths), device=device), torch.tensor(lengths, device=device)
    )
    position = torch.arange(sum(lengths), device=device)
    behind = position[:, None] - position[None, :]
    mask = (doc[:, None] == doc[None, :]) & (behind >= 0)
    return mask if window is None else mask & (behind < window)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("window", [None, 256])
def test_varlen_matches_sdpa_block_mask_with_gqa(window):
    torch.manual_seed(0)
    lengths = [700, 129, 1000, 3, 2264]  # 4,096 tokens, uneven documents
    heads, kv_heads, dim, total = 12, 2, 128, sum(lengths)
    module = torch.nn.Module()
    module.is_causal = True
    module.num_key_value_groups = (
        heads // kv_heads
    )  # SDPA's reference path repeats the key/value heads
    leaves = [
        torch.randn(1, h, total, dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        for h in (heads, kv_heads, kv_heads)
    ]
    mask = _block_causal_mask(lengths, "cuda", window)[None, None]
    results = []
    for kwargs in ({"cu_seqlens": document_boundaries(lengths).cuda()}, {}):
        out, _ = varlen_attention_forward(
            module,
            *leaves,
            mask if not kwargs else None,
            scaling=dim**-0.5,
            sliding_window=window,
            **kwargs,
        )
        grads = torch.autograd.grad(out.float().square().sum(), leaves)
        results.append((out.float(), *[g.float() for g in grads]))
    for ours, reference in zip(*results):
        error = (ours - reference).norm() / reference.norm()
        print(f"relative error {error:.2e}")
        assert error < 1e-2
