"""Checks of `rotary_kernel`'s Triton kernel run by Triton's interpreter on CPU tensors.

Run as `TRITON_INTERPRET=1 python -m tests.rollout.rotary_interpreted` (the interpreter is
chosen when the kernel is defined, so it needs a process of its own); prints one JSON
object. tests/rollout/test_rollout_rotary_kernel.py runs it and judges the result.
"""

from __future__ import annotations

import json

import torch

from trainer.rollout import rotary_kernel
from trainer.rollout.decode_ops import rotary_store


def _case(rows: int, heads: int, kv_heads: int, dim: int, views: bool) -> tuple:
    """q, k, v (views of one fused q/k/v output, or tensors of their own as after Qwen3's
    q/k norms), cos, sin, two caches and a slot, in fp32."""
    generator = torch.Generator().manual_seed(rows * 100 + dim)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=generator)

    if views:
        fused = randn(rows, 1, (heads + 2 * kv_heads) * dim)
        q, k, v = (
            part.view(rows, 1, part.shape[-1] // dim, dim).transpose(1, 2)
            for part in fused.split([heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
        )
    else:
        q, k = randn(rows, heads, 1, dim), randn(rows, kv_heads, 1, dim)
        v = randn(rows, 1, kv_heads, dim).transpose(1, 2)
    angles = randn(rows, 1, 1, dim) * 3
    width = 8
    keys, values = randn(rows, width, kv_heads, dim), randn(rows, width, kv_heads, dim)
    return q, k, v, angles.cos(), angles.sin(), keys, values, torch.tensor([5])


def kernel_errors() -> dict:
    """Largest difference from `decode_ops.rotary_store` (q, and the whole caches) per case:
    grouped heads on views of a fused output, a head dim whose half is no power of two,
    heads of their own, one KV head per query head, no rows, and sin in another layout than
    cos."""
    cases = {
        "grouped_views": (5, 6, 2, 16, True),
        "odd_half": (3, 4, 2, 12, True),
        "own_tensors": (4, 4, 2, 8, False),
        "no_groups": (2, 3, 3, 8, True),
        "no_rows": (0, 4, 2, 8, True),
    }
    errors = {}
    for name, shape in cases.items():
        q, k, v, cos, sin, keys, values, slot = _case(*shape)
        want_keys, want_values = keys.clone(), values.clone()
        want = rotary_store(q, k, v, cos, sin, want_keys, want_values, slot)
        got = rotary_kernel.rotary_store(q, k, v, cos, sin, keys, values, slot)
        assert got.shape == want.shape and got.dtype == want.dtype, name
        errors[name] = max(
            float((a - b).abs().max()) if a.numel() else 0.0
            for a, b in ((got, want), (keys, want_keys), (values, want_values))
        )
    # cos and sin in different layouts: one row's angles broadcast to every row as sin
    q, k, v, cos, sin, keys, values, slot = _case(4, 4, 2, 8, True)
    sin = sin[:1].expand_as(sin)
    want_keys, want_values = keys.clone(), values.clone()
    want = rotary_store(q, k, v, cos, sin, want_keys, want_values, slot)
    got = rotary_kernel.rotary_store(q, k, v, cos, sin, keys, values, slot)
    errors["sin_broadcast"] = max(
        float((a - b).abs().max())
        for a, b in ((got, want), (keys, want_keys), (values, want_values))
    )
    return errors


def self_check() -> dict:
    """`check` on the kernel (fp32, fp16), then on kernels gone wrong: writing one slot too
    far, and leaving k unrotated (cos 1 and sin 0 for the keys' heads alone cannot be
    given, so all of q and k go unrotated)."""
    cpu = torch.device("cpu")
    out = {str(dtype): rotary_kernel.check(cpu, dtype) for dtype in (torch.float32, torch.float16)}
    right = rotary_kernel.rotary_store

    def next_slot(q, k, v, cos, sin, keys, values, slot):
        return right(q, k, v, cos, sin, keys, values, slot + 1)

    def unrotated(q, k, v, cos, sin, keys, values, slot):
        return right(q, k, v, torch.ones_like(cos), torch.zeros_like(sin), keys, values, slot)

    for name, wrong in (("next slot", next_slot), ("unrotated", unrotated)):
        rotary_kernel.rotary_store = wrong
        out[name] = rotary_kernel.check(cpu, torch.float32)
    rotary_kernel.rotary_store = right
    return out


if __name__ == "__main__":
    print(json.dumps({"kernel": kernel_errors(), "self_check": self_check()}))
