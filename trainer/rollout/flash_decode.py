"""Decode-step attention kernels that read only each row's filled cache slots: FlashAttention-2,
and `split_kv`'s Triton kernel (`split_attention`; faster, the decoder's first choice).

The matmul attention of `static_cache` reads a whole span of the cache for every row (its
left padding and the empty slots up to the next multiple of SLOT_BUCKET included), writes the
scores in fp32 and reads them back. FlashAttention reads each row's keys and values once
and keeps the scores on chip; the query heads that share a KV head are passed as that many
query tokens of one sequence (`attend`), so they share one read too. Its variable-length
form finds row r's keys at `cum_seq_k[r]` in the packed (rows * width, kv_heads, dim) cache
and reads `seqused_k[r]` of them, so with the cache laid out (rows, width, kv_heads, dim)
the left-padded layout needs no change: row r starts at r * width + pad_r and uses
slot + 1 - pad_r slots.

`torch.ops.aten._flash_attention_forward` takes `seqused_k` (torch >= 2.11, CUDA, fp16/bf16);
`check` runs a kernel once against the matmul attention and says why not where it cannot be
used.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from trainer.rollout.decode_ops import rotary_store, rotary_store_packed

AttentionFn = Callable[..., torch.Tensor]
KERNELS = ("split", "flash")  # split_kv's Triton kernel; FlashAttention-2


def varlen_op(
    *args: torch.Tensor | int | float | bool, **kwargs: torch.Tensor | float | None
) -> tuple[torch.Tensor, ...]:
    """The FlashAttention-2 kernel (looked up at call time, so a torch without it fails here)."""
    return torch.ops.aten._flash_attention_forward(*args, **kwargs)


def attend(
    packed: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    cum_q: torch.Tensor,
    starts: torch.Tensor,
    used: torch.Tensor,
    max_k: int,
    scale: float,
) -> torch.Tensor:
    """packed queries (R * group, KV, D) from `decode_ops.pack_queries`, keys/values
    (R, W, KV, D), cum_q (R + 1,) int32 (r * group), starts (R + 1,) int32 (row r's first
    slot in the packed cache, then R * W), used (R,) int32 -> (R, H, 1, D).

    With grouped-query heads, a one-token query per head would make the kernel run one
    thread block per (row, query head), each reading the row's keys and values again for
    every query head of a group. The group's query heads sit at the same position, so they
    are passed as `group` non-causal query tokens of one sequence per KV head: one block per
    (row, KV head) reads that head's keys and values once."""
    rows = len(used)
    width, kv_heads, dim = keys.shape[1], keys.shape[2], keys.shape[3]
    group = packed.shape[0] // rows
    out = varlen_op(
        packed,
        keys.view(rows * width, kv_heads, dim),
        values.view(rows * width, kv_heads, dim),
        cum_q,
        starts,
        group,
        max_k,
        0.0,
        False,
        False,
        scale=scale,
        seqused_k=used,
    )[0]
    return out.view(rows, group, kv_heads, dim).transpose(1, 2).reshape(rows, -1, 1, dim)


def decode_attention(
    slot: torch.Tensor,
    pad: torch.Tensor,
    width: int,
    span: int,
    scale: float,
    prepare: Callable[..., torch.Tensor],
    group: int,
) -> AttentionFn:
    """The attention of one decode step at cache `slot` (a (1,) device tensor) for rows with
    left padding `pad` (R, 1): `prepare` (`decode_ops.rotary_store_packed`) applies rotary,
    writes the step's keys and values into the (R, W, KV, D) cache and packs the queries
    (`group` query heads per KV head); then each row attends over its filled slots.
    Everything is computed on the device, so a CUDA graph replays it for any slot."""
    rows = pad.shape[0]
    first = torch.arange(rows, device=pad.device) * width + pad.view(-1)
    end = torch.full((1,), rows * width, dtype=first.dtype, device=pad.device)
    starts = torch.cat([first, end]).to(torch.int32)
    used = (slot + 1 - pad.view(-1)).to(torch.int32)
    cum_q = torch.arange(rows + 1, dtype=torch.int32, device=pad.device) * group

    def run(q, k, v, cos, sin, layer_keys, layer_values) -> torch.Tensor:
        """q, k, v (R, heads, 1, D) before rotary -> (R, H, 1, D)."""
        packed = prepare(q, k, v, cos, sin, layer_keys, layer_values, slot)
        return attend(packed, layer_keys, layer_values, cum_q, starts, used, span, scale)

    return run


def split_attention(
    slot: torch.Tensor, pad: torch.Tensor, scale: float, prepare: Callable[..., torch.Tensor]
) -> AttentionFn:
    """`decode_attention` with `split_kv`'s kernel: `prepare` (`decode_ops.rotary_store`)
    applies rotary, writes the step's keys and values and gives q as (R, H, D); each row
    attends over its slots pad..slot (cut into pieces that run in parallel where rows are
    few)."""
    from trainer.rollout import split_kv  # Triton: imported where this kernel is asked for

    starts = pad.view(-1)

    def run(q, k, v, cos, sin, layer_keys, layer_values) -> torch.Tensor:
        """q, k, v (R, heads, 1, D) before rotary -> (R, H, 1, D)."""
        rotated = prepare(q, k, v, cos, sin, layer_keys, layer_values, slot).contiguous()
        out = split_kv.attend(rotated, layer_keys, layer_values, starts, slot, scale)
        return out.unsqueeze(2)

    return run


def build(
    kernel: str,
    slot: torch.Tensor,
    pad: torch.Tensor,
    width: int,
    scale: float,
    group: int,
    prepare: Callable[..., torch.Tensor],
    prepare_packed: Callable[..., torch.Tensor],
) -> AttentionFn:
    """The decode attention of `kernel` (one of KERNELS) over a (R, width, KV, D) cache, with
    `decode_ops.rotary_store` and `rotary_store_packed` (compiled or not) as `prepare` and
    `prepare_packed`."""
    if kernel == "split":
        return split_attention(slot, pad, scale, prepare)
    return decode_attention(slot, pad, width, width, scale, prepare_packed, group)


def check(
    device: torch.device,
    dtype: torch.dtype,
    heads: int,
    kv_heads: int,
    dim: int,
    reference: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    kernel: str = "flash",
) -> str | None:
    """None when `kernel`'s decode attention gives `reference`'s result on a small left-padded
    batch, else why not.

    `reference(q (R, H, 1, D), keys (R, KV, S, D), values, mask (R, 1, 1, S))` is the matmul
    attention the decoder would use instead."""
    if device.type != "cuda" or dtype not in (torch.float16, torch.bfloat16):
        return f"needs CUDA and fp16/bf16 (have {device.type}, {dtype})"
    return compare(device, dtype, heads, kv_heads, dim, reference, kernel)


def compare(
    device: torch.device,
    dtype: torch.dtype,
    heads: int,
    kv_heads: int,
    dim: int,
    reference: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    kernel: str = "flash",
) -> str | None:
    """`check`'s comparison, on any device: None when the results agree, else why not."""
    generator = torch.Generator(device=device).manual_seed(0)
    rows, width, slot = 3, 24, 17
    pad = torch.tensor([[0], [5], [11]], device=device)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=generator, device=device).to(dtype)

    q = randn(rows, heads, 1, dim)
    keys, values = randn(rows, width, kv_heads, dim), randn(rows, width, kv_heads, dim)
    k, v = randn(rows, kv_heads, 1, dim), randn(rows, kv_heads, 1, dim)
    slot_t = torch.tensor([slot], device=device)
    # rotary at position 0 (cos 1, sin 0) leaves q and k as they are
    cos = torch.ones((rows, 1, 1, dim), dtype=dtype, device=device)
    sin = torch.zeros_like(cos)
    group = heads // kv_heads
    try:
        attention = build(
            kernel, slot_t, pad, width, dim**-0.5, group, rotary_store, rotary_store_packed
        )
        got = attention(q, k, v, cos, sin, keys, values)
    except Exception as err:  # a kernel that cannot run here costs speed, never the run
        return f"the kernel failed: {type(err).__name__}: {err}"
    columns = torch.arange(width, device=device)
    mask = ((columns >= pad) & (columns <= slot)).view(rows, 1, 1, width)
    want = reference(q, keys.transpose(1, 2), values.transpose(1, 2), mask)
    error = float((got.float() - want.float()).abs().max())
    return None if error < 3e-2 else f"its result is off by {error:.3g}"
