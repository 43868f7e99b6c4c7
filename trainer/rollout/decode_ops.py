"""The elementwise parts of a Llama-family layer as pure functions, which torch.compile fuses.

Inside a CUDA graph a decode step costs what its kernels cost, and eagerly most of its
kernels are tiny elementwise ones: RMSNorm alone is six (casts, square, mean, rsqrt, two
multiplies), rotary embedding about seven per tensor, then the residual adds, SiLU and the
attention mask and softmax. At 1.5B and 256 rows that is ~800 launches of a few
microseconds each per step, more time than the matmuls. Written as functions of tensors,
torch.compile turns each group into one kernel (the matmuls stay cuBLAS calls), and the
decoder captures the compiled step in its CUDA graphs as before.

Numerics follow transformers' modules (RMSNorm in fp32, cast back before the weight);
compiled code may skip a rounding to bf16 between fused ops, so results match to bf16
precision, not bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' LlamaRMSNorm / Qwen2RMSNorm."""
    normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
    return weight * normed.to(x.dtype)


def add_rms_norm(
    x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The residual add and the next norm, which read the same tensor: (x + delta, norm(x +
    delta))."""
    total = x + delta
    return total, rms_norm(total, weight, eps)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotary(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' apply_rotary_pos_emb on q and k (R, heads, T, D) with cos/sin (R, 1, T, D)."""
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def pack_queries(q: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """q (R, H, 1, D) -> (R * group, KV, D): row r's query heads that read KV head h become
    `group` consecutive query tokens of sequence r under head h (`flash_decode.attend`)."""
    rows, heads, _, dim = q.shape
    group = heads // kv_heads
    return q.view(rows, kv_heads, group, dim).transpose(1, 2).reshape(rows * group, kv_heads, dim)


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
    """A decode step's attention inputs, in one fused pass when compiled: rotary on q and k
    (R, heads, 1, D), k and v written at cache `slot` (1,) of the (R, W, KV, D) caches; the
    rotated q as (R, H, D). Eagerly these are some six kernels per layer (two rotary, two
    cache writes, layout copies)."""
    q, k = rotary(q, k, cos, sin)
    keys.index_copy_(1, slot, k.transpose(1, 2).to(keys.dtype))
    values.index_copy_(1, slot, v.transpose(1, 2).to(values.dtype))
    return q.reshape(q.shape[0], q.shape[1], q.shape[3])


def rotary_store_packed(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    slot: torch.Tensor,
) -> torch.Tensor:
    """`rotary_store`, with q packed by `pack_queries` for FlashAttention."""
    rotated = rotary_store(q, k, v, cos, sin, keys, values, slot)
    return pack_queries(rotated.unsqueeze(2), k.shape[1])


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return F.silu(gate) * up


def masked_softmax(
    scores: torch.Tensor, mask: torch.Tensor, scale: float, dtype: torch.dtype
) -> torch.Tensor:
    """softmax(scores * scale) in fp32 over allowed positions (`mask` True), cast to `dtype`."""
    scaled = (scores.float() * scale).masked_fill(~mask, float("-inf"))
    return torch.softmax(scaled, dim=-1).to(dtype)


@dataclass(frozen=True)
class DecodeOps:
    rms_norm: Callable[..., torch.Tensor]
    add_rms_norm: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    rotary: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    silu_mul: Callable[..., torch.Tensor]
    masked_softmax: Callable[..., torch.Tensor]
    rotary_store: Callable[..., torch.Tensor]
    rotary_store_packed: Callable[..., torch.Tensor]

    @classmethod
    def eager(cls) -> DecodeOps:
        return cls(
            rms_norm,
            add_rms_norm,
            rotary,
            silu_mul,
            masked_softmax,
            rotary_store,
            rotary_store_packed,
        )

    @classmethod
    def compiled(cls) -> DecodeOps:
        """Each function compiled once for all layers (they call it with the same shapes).
        torch.compile's default shape handling makes a dimension dynamic when a second size
        shows up (the attention span grows by 128 slots; train and validation batch sizes
        differ), so a function compiles at most twice, not once per span."""
        fuse = torch.compile
        return cls(
            fuse(rms_norm),
            fuse(add_rms_norm),
            fuse(rotary),
            fuse(silu_mul),
            fuse(masked_softmax),
            fuse(rotary_store),
            fuse(rotary_store_packed),
        )
