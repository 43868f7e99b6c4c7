"""`model.attn_implementation=varlen` keeps a sliding-attention layer's window: the CUDA
branch dropped the `sliding_window` a Qwen2/Qwen3 layer passes, so a config with
`use_sliding_window: true` trained those layers with full attention (another model than the
one exported and rolled out). The branch runs here on CPU: query tensors report CUDA, and
varlen_attn is replaced by plain torch doing what its docstring says of `window_size`
(the kernel itself is checked in tests/trainer/test_attention_gpu.py)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch
import torch.nn.attention.varlen
import torch.nn.functional as F
from transformers import (
    AttentionInterface,
    AutoModelForCausalLM,
    LlamaConfig,
    Qwen2Config,
    Qwen3Config,
)
from transformers.masking_utils import sliding_window_overlay

from trainer.attention import NAME, flash_window, varlen_attention_forward

TINY: dict[str, Any] = {
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}
LENGTHS = (13, 9)  # two packed documents, each longer than the window
WINDOW = 4


class _ReportsCuda(torch.Tensor):
    @property
    def is_cuda(self) -> bool:  # type: ignore[override]
        return True


def _kept(length: int, window_size: tuple[int, int]) -> torch.Tensor:
    """The (query, key) pairs varlen_attn's documented window keeps in one document."""
    offset = torch.arange(length)[:, None] - torch.arange(length)[None, :]  # q - k
    left, right = window_size
    keep = torch.ones(length, length, dtype=torch.bool)
    if left >= 0:
        keep &= offset <= left
    if right >= 0:
        keep &= -offset <= right
    return keep


def _reference_varlen(q, k, v, cu_q, cu_k, max_q, max_k, *, scale=None, window_size=(-1, -1)):
    """varlen_attn as plain torch: attention within each document, under `window_size`."""
    out = torch.empty_like(q)
    bounds = cu_q.tolist()
    for start, end in itertools.pairwise(bounds):
        rows = [t[start:end].transpose(0, 1) for t in (q, k, v)]
        mask = _kept(end - start, window_size)
        out[start:end] = F.scaled_dot_product_attention(
            *rows, attn_mask=mask, scale=scale
        ).transpose(0, 1)
    return out


def _forced_cuda(module, query, *args, **kwargs):
    return varlen_attention_forward(module, query.as_subclass(_ReportsCuda), *args, **kwargs)


@pytest.mark.parametrize("window", [None, 1, WINDOW, 64])
def test_flash_window_keeps_the_pairs_transformers_sliding_mask_keeps(window):
    length = 12
    q, k = torch.arange(length)[:, None], torch.arange(length)[None, :]
    transformers_keeps = k <= q
    if window is not None:
        transformers_keeps &= sliding_window_overlay(window)(0, 0, q, k)
    assert torch.equal(_kept(length, flash_window(window)), transformers_keeps)


CONFIGS = {
    "qwen2-sliding": Qwen2Config(
        **TINY, use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1
    ),
    "qwen2-layer-types-sliding": Qwen2Config(
        **TINY,
        use_sliding_window=True,
        sliding_window=WINDOW,
        layer_types=["sliding_attention", "full_attention"],
    ),
    "qwen3-sliding": Qwen3Config(
        **TINY, use_sliding_window=True, sliding_window=WINDOW, max_window_layers=0
    ),
    "qwen2-full": Qwen2Config(**TINY, use_sliding_window=False, sliding_window=WINDOW),
    "llama": LlamaConfig(**TINY),
}


@pytest.mark.parametrize("name", CONFIGS)
def test_packed_varlen_equals_each_document_alone(name, monkeypatch):
    """Packed through the CUDA branch, each document's logits are its own alone (SDPA with
    transformers' mask, sliding window included); the windowless configs are the control."""
    monkeypatch.setattr(torch.nn.attention.varlen, "varlen_attn", _reference_varlen)
    monkeypatch.setitem(AttentionInterface._global_mapping, NAME, _forced_cuda)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(CONFIGS[name], attn_implementation=NAME).eval()
    sliding = [getattr(layer.self_attn, "sliding_window", None) for layer in model.model.layers]
    if name.endswith("sliding"):
        assert WINDOW in sliding, sliding  # the config does give the model a sliding layer
    ids = torch.randint(3, TINY["vocab_size"], (1, sum(LENGTHS)))
    positions = torch.cat([torch.arange(n) for n in LENGTHS])[None]
    cu_seqlens = torch.tensor([0, LENGTHS[0], sum(LENGTHS)], dtype=torch.int32)
    with torch.no_grad():
        packed = model(ids, position_ids=positions, cu_seqlens=cu_seqlens).logits
        alone = torch.cat([model(part).logits for part in ids.split(LENGTHS, dim=1)], dim=1)
    torch.testing.assert_close(packed.as_subclass(torch.Tensor), alone, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [({"softcap": 30.0}, "softcap"), ({"is_causal": False}, "is_causal=False")],
)
def test_a_keyword_the_kernel_cannot_apply_is_refused(kwargs, named):
    module = torch.nn.Module()
    query = torch.zeros(1, 2, 4, 8).as_subclass(_ReportsCuda)
    cu_seqlens = torch.tensor([0, 4], dtype=torch.int32)
    with pytest.raises(
        ValueError, match=rf"^model\.attn_implementation=varlen: Module passes {named}, "
    ):
        varlen_attention_forward(module, query, query, query, None, cu_seqlens=cu_seqlens, **kwargs)
