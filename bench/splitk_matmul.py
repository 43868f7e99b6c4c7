"""A split-K Triton matmul, the alternative to cuBLAS that bench/decode_matmuls.py measures.

A decode step's o_proj and q/k/v products at 256 rows make few output tiles (24-32 of
128x128 for 132 SMs), and down_proj's are deep (K = 8,960): with few tiles, most SMs idle
unless K is split among programs too, each writing a partial product in fp32 that a sum
then adds up. Whether that beats cuBLAS (which splits K itself where its heuristics say so)
is the question. bench/decode_matmuls.py tries every config in CONFIGS with every split
count of SPLITS that fits, for each shape, and keeps the fastest; the partials' sum is in
its time, and the time without it is reported too (a consumer could fold the sum into its
own pass). No bias is added: q/k/v's bias add is left out of this side's time.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton
import triton.language as tl

# (block_m, block_n, block_k, num_warps, num_stages); every split count in SPLITS that
# divides K into whole blocks is tried with each
CONFIGS = [
    (64, 64, 64, 4, 4),
    (64, 64, 128, 4, 4),
    (64, 128, 64, 4, 3),
    (64, 128, 128, 4, 4),
    (128, 64, 64, 4, 3),
    (128, 64, 128, 4, 4),
    (128, 128, 64, 8, 3),
]
SPLITS = (1, 2, 3, 4, 5, 6, 8, 10)


@triton.jit
def _matmul_partial(
    x_ptr,
    w_ptr,
    out_ptr,
    rows,
    out_features,
    k_per_split,
    x_stride,
    w_stride,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """Program (m tile, n tile, split): x[m tile, split's K] @ w[n tile, split's K].T into
    out[split, m tile, n tile] (fp32 partials, or the result itself with one split)."""
    m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    split = tl.program_id(2)
    k_range = tl.arange(0, BLOCK_K)
    start = split * k_per_split
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k in range(start, start + k_per_split, BLOCK_K):
        a = tl.load(
            x_ptr + m[:, None] * x_stride + (k + k_range)[None, :],
            mask=m[:, None] < rows,
            other=0.0,
        )
        b = tl.load(
            w_ptr + n[:, None] * w_stride + (k + k_range)[None, :],
            mask=n[:, None] < out_features,
            other=0.0,
        )
        acc = tl.dot(a, tl.trans(b), acc)
    out = out_ptr + split.to(tl.int64) * rows * out_features + m[:, None] * out_features + n
    inside = (m[:, None] < rows) & (n[None, :] < out_features)
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=inside)


def splits_for(in_features: int, block_k: int) -> list[int]:
    """The split counts of SPLITS that cut K into whole blocks."""
    return [s for s in SPLITS if in_features % (s * block_k) == 0]


def matmul(
    x: torch.Tensor,
    weight: torch.Tensor,
    config: tuple[int, ...],
    splits: int,
    summed: bool = True,
) -> Callable[[], torch.Tensor]:
    """A call computing x @ weight.T (x (rows, K) and weight (N, K), unit stride along K),
    its buffers made once: with one split it writes the result in x's dtype; with more,
    fp32 partials, summed into x's dtype (or returned as they are, (splits, rows, N), when
    not `summed`)."""
    block_m, block_n, block_k, warps, stages = config
    rows, in_features = x.shape
    out_features = weight.shape[0]
    out = torch.empty(
        (splits, rows, out_features),
        dtype=x.dtype if splits == 1 else torch.float32,
        device=x.device,
    )
    grid = (triton.cdiv(rows, block_m), triton.cdiv(out_features, block_n), splits)

    def run() -> torch.Tensor:
        _matmul_partial[grid](
            x,
            weight,
            out,
            rows,
            out_features,
            in_features // splits,
            x.stride(0),
            weight.stride(0),
            BLOCK_M=block_m,
            BLOCK_N=block_n,
            BLOCK_K=block_k,
            num_warps=warps,
            num_stages=stages,
        )
        if splits == 1:
            return out[0]
        return out.sum(0).to(x.dtype) if summed else out

    return run
