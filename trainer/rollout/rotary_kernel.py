"""A decode step's rotary embedding and cache writes as one Triton kernel.

Before a layer's attention, the step's q and k get rotary at each row's position, and k and
v go into the (rows, width, kv_heads, dim) cache at the step's slot. torch.compile turns
`decode_ops.rotary_store` into three kernels (q's rotary, k's rotary with its cache write,
v's cache write); at 256 rows each moves well under a megabyte, so each costs about its
launch. Here one program per (row, head) does its head's part: rotates a q head into the
attention's (rows, heads, dim) input, rotates a k head into the cache, or copies a v head
into it; one launch per layer. On 1xH200 (qwen2-1.5b, 256 rows) it takes 3.96 us a layer,
and the decode step's element-wise work went from 0.398 to 0.351 ms with it
(`bench/rollout.py --profile`, runs 11 and 12 of docs/benchmarks.md).

Rotary is computed in fp32 and rounded once to the inputs' dtype, as the compiled op
computes it (eager PyTorch rounds each product and the sum to the dtype).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

LAUNCH = {"num_warps": 1}


@triton.jit
def _rotary_store(
    q_ptr,
    k_ptr,
    v_ptr,
    cos_ptr,
    sin_ptr,
    out_ptr,
    keys_ptr,
    values_ptr,
    slot_ptr,
    q_row_stride,
    q_head_stride,
    k_row_stride,
    k_head_stride,
    v_row_stride,
    v_head_stride,
    cos_row_stride,
    cache_row_stride,
    cache_slot_stride,
    cache_head_stride,
    HEADS: tl.constexpr,
    KV: tl.constexpr,
    HALF: tl.constexpr,
    HALF_PAD: tl.constexpr,
):
    """Program (row, j): j < HEADS rotates q head j into out; j < HEADS + KV rotates k head
    j - HEADS into keys at the slot; the rest copy v head j - HEADS - KV into values."""
    row = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1)
    d = tl.arange(0, HALF_PAD)
    inside = d < HALF
    at_slot = row * cache_row_stride + tl.load(slot_ptr) * cache_slot_stride
    if j < HEADS + KV:
        if j < HEADS:
            source = q_ptr + row * q_row_stride + j * q_head_stride
            target = out_ptr + (row * HEADS + j) * (2 * HALF)
        else:
            source = k_ptr + row * k_row_stride + (j - HEADS) * k_head_stride
            target = keys_ptr + at_slot + (j - HEADS) * cache_head_stride
        first = tl.load(source + d, mask=inside).to(tl.float32)
        second = tl.load(source + HALF + d, mask=inside).to(tl.float32)
        angles = row * cos_row_stride + d
        cos_first = tl.load(cos_ptr + angles, mask=inside).to(tl.float32)
        cos_second = tl.load(cos_ptr + angles + HALF, mask=inside).to(tl.float32)
        sin_first = tl.load(sin_ptr + angles, mask=inside).to(tl.float32)
        sin_second = tl.load(sin_ptr + angles + HALF, mask=inside).to(tl.float32)
        # rotate_half(x) is (-second, first)
        new_first = first * cos_first - second * sin_first
        new_second = second * cos_second + first * sin_second
        kind = target.dtype.element_ty
        tl.store(target + d, new_first.to(kind), mask=inside)
        tl.store(target + HALF + d, new_second.to(kind), mask=inside)
    else:
        head = j - HEADS - KV
        source = v_ptr + row * v_row_stride + head * v_head_stride
        target = values_ptr + at_slot + head * cache_head_stride
        for part in range(2):
            value = tl.load(source + part * HALF + d, mask=inside)
            tl.store(target + part * HALF + d, value.to(target.dtype.element_ty), mask=inside)


def _unit_dim(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def rotary_store(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    slot: torch.Tensor,
) -> torch.Tensor:
    """`decode_ops.rotary_store` for one decode token per row: q (R, H, 1, D), k and v
    (R, KV, 1, D) in any row and head strides (views of the q/k/v matmul's output), cos and
    sin (R, 1, 1, D), caches (R, W, KV, D) with unit stride along D, slot (1,) on the device;
    writes k and v at the slot and returns the rotated q as a new (R, H, D) tensor."""
    rows, heads, tokens, dim = q.shape
    kv_heads = k.shape[1]
    if tokens != 1 or dim % 2:
        raise ValueError(f"rotary_store kernel: one token per row and an even dim, got {q.shape}")
    if keys.stride(-1) != 1 or values.stride() != keys.stride():
        raise ValueError("rotary_store kernel: caches need unit stride along dim, alike")
    q, k, v, cos, sin = (_unit_dim(x[:, :, 0]) for x in (q, k, v, cos, sin))
    if sin.stride() != cos.stride():  # the kernel steps through both by cos's strides
        cos, sin = cos.contiguous(), sin.contiguous()
    out = torch.empty((rows, heads, dim), dtype=q.dtype, device=q.device)
    if rows:
        half = dim // 2
        _rotary_store[(rows, heads + 2 * kv_heads)](
            q,
            k,
            v,
            cos,
            sin,
            out,
            keys,
            values,
            slot,
            q.stride(0),
            q.stride(1),
            k.stride(0),
            k.stride(1),
            v.stride(0),
            v.stride(1),
            cos.stride(0),
            keys.stride(0),
            keys.stride(1),
            keys.stride(2),
            HEADS=heads,
            KV=kv_heads,
            HALF=half,
            HALF_PAD=triton.next_power_of_2(half),
            **LAUNCH,
        )
    return out


def check(device: torch.device, dtype: torch.dtype) -> str | None:
    """None when the kernel matches `decode_ops.rotary_store` computed in fp32 and rounded
    once (within a unit in the last place of `dtype`, of 1.0 for values under 1, and a few
    of fp32's): the rotated q, the keys and values at the slot, and every other cache slot
    untouched, on q/k/v views of one small fused projection output with grouped heads on
    `device`; else why not."""
    from trainer.rollout.decode_ops import rotary_store as reference

    rows, heads, kv_heads, dim, width, slot = 3, 4, 2, 16, 6, 4
    generator = torch.Generator(device=device).manual_seed(0)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=generator, device=device) * 2

    fused = randn(rows, 1, (heads + 2 * kv_heads) * dim).to(dtype)
    q, k, v = (
        part.view(rows, 1, part.shape[-1] // dim, dim).transpose(1, 2)
        for part in fused.split([heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
    )
    angles = randn(rows, 1, 1, dim)
    cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    keys, values = (
        randn(rows, width, kv_heads, dim).to(dtype),
        randn(rows, width, kv_heads, dim).to(dtype),
    )
    want_keys, want_values = (x.to(torch.float32, copy=True) for x in (keys, values))
    slot_t = torch.tensor([slot], device=device)
    try:
        got = rotary_store(q, k, v, cos, sin, keys, values, slot_t)
    except Exception as err:  # Triton cannot compile or launch here
        return f"{type(err).__name__}: {err}"
    q32, k32, v32, cos32, sin32 = (x.float() for x in (q, k, v, cos, sin))
    want = reference(q32, k32, v32, cos32, sin32, want_keys, want_values, slot_t)
    # a unit of `dtype` where the once-rounded results straddle a rounding point; a few of
    # fp32's where q * cos and rotate_half(q) * sin nearly cancel (fused multiply-adds)
    eps = torch.finfo(dtype).eps + 32 * torch.finfo(torch.float32).eps
    for name, have, expected in (
        ("q", got, want.to(dtype)),
        ("keys", keys, want_keys.to(dtype)),
        ("values", values, want_values.to(dtype)),
    ):
        error = (have.float() - expected.float()).abs()
        if bool((error > eps * expected.float().abs().clamp(min=1.0)).any()):
            return f"{name} off by up to {float(error.max()):.3g} from rotary_store"
    return None
