"""Decode-step attention as a Triton kernel with small tiles, split over the keys for few rows.

One decode step asks each row's one query token per head to attend over that row's cache.
FlashAttention-2 runs this shape (the query heads of a KV head packed as query rows,
`flash_decode.attend`) as one thread block per (row, KV head) with a tile of 128 query rows
by 64 keys and 4 warps (`Flash_fwd_kernel_traits<128, 128, 64, 4>`, which its launch code,
flash_fwd_launch_template.h, picks for head dim 128 on H100/H200): for qwen2-1.5b's 6
query heads per KV head most of the tile is padding, its shared memory leaves room for few
blocks per SM, and each block walks its row's keys as a chain of dependent loads, so the
GPU waits on memory latency rather than bandwidth. Here a program's tile is 16 query rows
(the fewest a tensor-core dot takes) by BLOCK_N keys, with 2 warps: many programs fit on an
SM at once and keep more loads in flight. Where rows are too few to fill the GPU, each
(row, KV head) is also cut into `pieces` equal runs of slots, each its own program (the
FlashDecoding split), and a second small kernel combines a row's pieces by their
log-sum-exp, exactly as one softmax over all the row's slots would.
bench/decode_attention.py measures it against FlashAttention-2 and chose these defaults.

The query heads that share a KV head are one program's rows (`GROUP_PAD`, padded to the 16
rows a tensor-core dot needs), so each piece of keys and values is read once for all of
them. Queries and the result are (rows, heads, dim) with head h reading KV head
h // group, the layout of the q projection's output and of the o projection's input, so
neither needs a copy. The cache is the left-padded static cache laid out (rows, width,
kv_heads, dim): row r's keys are slots `starts[r]` (its padding end) to `slot` (this
step's), both read on the device, so one CUDA graph replays every step.

Triton compiles for the GPU at first use; with TRITON_INTERPRET=1 the same kernels run on
CPU tensors (fp16/fp32), which is how the CPU tests check them.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

TARGET_PROGRAMS = 256  # (row, KV head, piece) programs per call, at least
MAX_PIECES = 16
BLOCK_N = 32  # slots per inner step of a program
LAUNCH = {"num_warps": 2, "num_stages": 3}


@triton.jit
def _split_kv_pieces(
    q_ptr,
    k_ptr,
    v_ptr,
    starts_ptr,
    slot_ptr,
    out_ptr,
    part_out_ptr,
    part_lse_ptr,
    scale,
    stride_kr,
    stride_kw,
    stride_kh,
    KV: tl.constexpr,
    GROUP: tl.constexpr,
    GROUP_PAD: tl.constexpr,
    DIM: tl.constexpr,
    PIECES: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Program (row, KV head, piece): the softmax-weighted values over the piece's slots and
    their log-sum-exp (-inf for a piece past the row's end), for `_split_kv_combine`; with
    one piece, the result itself."""
    row = tl.program_id(0)
    head = tl.program_id(1)
    piece = tl.program_id(2)
    end = tl.load(slot_ptr) + 1
    start = tl.load(starts_ptr + row)
    span = tl.cdiv(tl.cdiv(end - start, PIECES), BLOCK_N) * BLOCK_N
    lo = start + piece * span
    hi = tl.minimum(lo + span, end)
    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, DIM)
    q_rows = row * KV * GROUP + head * GROUP + g
    q = tl.load(q_ptr + q_rows[:, None] * DIM + d[None, :], mask=g[:, None] < GROUP, other=0.0)
    best = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    total = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, DIM], tl.float32)
    base = row.to(tl.int64) * stride_kr + head * stride_kh
    for first in range(lo, hi, BLOCK_N):
        n = first + tl.arange(0, BLOCK_N)
        valid = n < hi
        at = base + n[:, None].to(tl.int64) * stride_kw + d[None, :]
        keys = tl.load(k_ptr + at, mask=valid[:, None], other=0.0)
        scores = tl.dot(q, tl.trans(keys)) * scale
        scores = tl.where(valid[None, :], scores, float("-inf"))
        new_best = tl.maximum(best, tl.max(scores, 1))
        shift = tl.where(new_best == float("-inf"), 0.0, new_best)  # all masked so far
        weights = tl.exp(scores - shift[:, None])
        rescale = tl.exp(best - shift)
        total = total * rescale + tl.sum(weights, 1)
        values = tl.load(v_ptr + at, mask=valid[:, None], other=0.0)
        acc = acc * rescale[:, None] + tl.dot(weights.to(values.dtype), values)
        best = new_best
    filled = total > 0
    lse = tl.where(filled, best + tl.log(tl.where(filled, total, 1.0)), float("-inf"))
    out = acc / tl.where(filled, total, 1.0)[:, None]
    keep = g < GROUP
    if PIECES == 1:
        at = q_rows[:, None] * DIM + d[None, :]
        tl.store(out_ptr + at, out.to(out_ptr.dtype.element_ty), mask=keep[:, None])
    else:
        part = (row * KV + head) * PIECES + piece
        tl.store(part_lse_ptr + part * GROUP + g, lse, mask=keep)
        at = (part * GROUP + g)[:, None] * DIM + d[None, :]
        tl.store(part_out_ptr + at, out, mask=keep[:, None])


@triton.jit
def _split_kv_combine(
    part_out_ptr,
    part_lse_ptr,
    out_ptr,
    KV: tl.constexpr,
    GROUP: tl.constexpr,
    GROUP_PAD: tl.constexpr,
    DIM: tl.constexpr,
    PIECES: tl.constexpr,
    PIECES_PAD: tl.constexpr,
):
    """Program (row, KV head): the pieces' outputs weighted by exp(their lse - the row's)."""
    row = tl.program_id(0)
    head = tl.program_id(1)
    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, DIM)
    p = tl.arange(0, PIECES_PAD)
    keep = g < GROUP
    first = (row * KV + head) * PIECES
    lse = tl.load(
        part_lse_ptr + (first + p[:, None]) * GROUP + g[None, :],
        mask=(p[:, None] < PIECES) & keep[None, :],
        other=float("-inf"),
    )
    best = tl.max(lse, 0)
    best = tl.where(best == float("-inf"), 0.0, best)  # padded query rows: no piece
    total = tl.sum(tl.exp(lse - best[None, :]), 0)
    acc = tl.zeros([GROUP_PAD, DIM], tl.float32)
    for piece in range(PIECES):
        piece_lse = tl.load(part_lse_ptr + (first + piece) * GROUP + g, mask=keep, other=0.0)
        weight = tl.where(keep, tl.exp(piece_lse - best), 0.0)
        piece_out = tl.load(
            part_out_ptr + ((first + piece) * GROUP + g)[:, None] * DIM + d[None, :],
            mask=keep[:, None],
            other=0.0,
        )
        acc += weight[:, None] * piece_out
    out = acc / tl.where(total > 0, total, 1.0)[:, None]
    q_rows = row * KV * GROUP + head * GROUP + g
    tl.store(
        out_ptr + q_rows[:, None] * DIM + d[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=keep[:, None],
    )


def pieces_for(rows: int, kv_heads: int) -> int:
    """How many pieces to cut each (row, KV head) into: enough for TARGET_PROGRAMS programs,
    a power of two from 1 to MAX_PIECES. On 1xH200 one piece is fastest at 128 and 256 rows
    (2 KV heads): the GPU is full, and a split only adds the combine
    (bench/decode_attention.py --sweep); fewer rows are cut into more pieces."""
    wanted = triton.cdiv(TARGET_PROGRAMS, rows * kv_heads)
    return min(MAX_PIECES, triton.next_power_of_2(wanted))


def attend(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    starts: torch.Tensor,
    slot: torch.Tensor,
    scale: float,
    pieces: int | None = None,
    block_n: int = BLOCK_N,
    **launch: int,
) -> torch.Tensor:
    """q (R, H, D) contiguous, keys/values (R, W, KV, D) with contiguous heads and dims,
    starts (R,) each row's first filled slot, slot (1,) this step's -> (R, H, D) in q's dtype:
    row r attends over slots starts[r]..slot of its cache. `pieces` (default `pieces_for`),
    `block_n` and `launch` (Triton's num_warps, num_stages; default LAUNCH) are for tuning."""
    rows, heads, dim = q.shape
    kv_heads = keys.shape[2]
    group = heads // kv_heads
    group_pad = max(16, triton.next_power_of_2(group))
    pieces = pieces or pieces_for(rows, kv_heads)
    out = torch.empty_like(q)
    part_out = torch.empty(
        (rows, kv_heads, pieces, group, dim) if pieces > 1 else (0,),
        dtype=torch.float32,
        device=q.device,
    )
    part_lse = torch.empty(
        (rows, kv_heads, pieces, group) if pieces > 1 else (0,),
        dtype=torch.float32,
        device=q.device,
    )
    _split_kv_pieces[(rows, kv_heads, pieces)](
        q,
        keys,
        values,
        starts,
        slot,
        out,
        part_out,
        part_lse,
        scale,
        keys.stride(0),
        keys.stride(1),
        keys.stride(2),
        KV=kv_heads,
        GROUP=group,
        GROUP_PAD=group_pad,
        DIM=dim,
        PIECES=pieces,
        BLOCK_N=block_n,
        **(launch or LAUNCH),
    )
    if pieces == 1:
        return out
    _split_kv_combine[(rows, kv_heads)](
        part_out,
        part_lse,
        out,
        KV=kv_heads,
        GROUP=group,
        GROUP_PAD=group_pad,
        DIM=dim,
        PIECES=pieces,
        PIECES_PAD=triton.next_power_of_2(pieces),
    )
    return out
