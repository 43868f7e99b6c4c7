"""The per-step token pick as two Triton kernels that read the logits (and the noise) once.

`fused_sampling.gumbel_pick` chooses argmax(logits / T - log(noise)) per row and reports the
chosen token's log-softmax; torch.compile turns it into two passes over the (rows, vocab)
logits (the race, then a log-sum-exp), each split over the vocabulary. Here each
(row, piece of the vocabulary) program runs the race and an online log-sum-exp over its
piece in one pass, and a second kernel combines a row's pieces: ties go to the lowest token
id, as torch.argmax's do, and the temperature division is correctly rounded, as torch's is,
so the choice is `gumbel_pick`'s.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

PIECES = 16  # programs per row (bench/token_pick.py)
BLOCK = 512  # vocabulary entries per inner step
LAUNCH = {"num_warps": 4}


@triton.jit
def _pick_pieces(
    logits_ptr,
    noise_ptr,
    noise_rows_ptr,
    temperature_ptr,
    best_ptr,
    index_ptr,
    top_ptr,
    total_ptr,
    vocab,
    logits_stride,
    noise_stride,
    GREEDY: tl.constexpr,
    NOISE_ROWS: tl.constexpr,
    PIECES: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Program (row, piece): the piece's best score and its lowest column, and its online
    log-sum-exp of the unscaled logits as (max, sum of exp(x - max))."""
    row = tl.program_id(0)
    piece = tl.program_id(1)
    span = tl.cdiv(tl.cdiv(vocab, PIECES), BLOCK) * BLOCK
    lo = piece * span
    hi = tl.minimum(lo + span, vocab)
    best = tl.full([BLOCK], float("-inf"), tl.float32)
    index = tl.zeros([BLOCK], tl.int32)
    top = tl.full([BLOCK], float("-inf"), tl.float32)
    total = tl.zeros([BLOCK], tl.float32)
    if not GREEDY:
        temperature = tl.load(temperature_ptr)
        noise_row = tl.load(noise_rows_ptr + row) if NOISE_ROWS else row.to(tl.int64)
    for start in range(lo, hi, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        valid = cols < hi
        x = tl.load(logits_ptr + row.to(tl.int64) * logits_stride + cols, mask=valid)
        x = tl.where(valid, x.to(tl.float32), float("-inf"))
        if GREEDY:
            score = x
        else:
            noise = tl.load(noise_ptr + noise_row * noise_stride + cols, mask=valid, other=1.0)
            noise = tl.maximum(noise, 1.1754943508222875e-38)  # torch.finfo(float32).tiny
            score = tl.math.div_rn(x, temperature) - tl.log(noise)
            score = tl.where(valid, score, float("-inf"))
        better = score > best  # strictly: a lane keeps its first (lowest) column on a tie
        best = tl.where(better, score, best)
        index = tl.where(better, cols, index)
        new_top = tl.maximum(top, x)
        shift = tl.where(new_top == float("-inf"), 0.0, new_top)
        total = total * tl.exp(top - shift) + tl.where(valid, tl.exp(x - shift), 0.0)
        top = new_top
    piece_best = tl.max(best, 0)
    piece_index = tl.min(tl.where(best == piece_best, index, 2147483647), 0)
    piece_top = tl.max(top, 0)
    shift = tl.where(piece_top == float("-inf"), 0.0, piece_top)
    piece_total = tl.sum(tl.where(top == float("-inf"), 0.0, total * tl.exp(top - shift)), 0)
    at = row * PIECES + piece
    tl.store(best_ptr + at, piece_best)
    tl.store(index_ptr + at, piece_index)
    tl.store(top_ptr + at, piece_top)
    tl.store(total_ptr + at, piece_total)


@triton.jit
def _pick_combine(
    logits_ptr,
    best_ptr,
    index_ptr,
    top_ptr,
    total_ptr,
    chosen_ptr,
    logprob_ptr,
    logits_stride,
    PIECES: tl.constexpr,
):
    """Program (row): the best of the row's pieces (lowest column on a tie) and its
    log-softmax, from the pieces' log-sum-exps."""
    row = tl.program_id(0)
    p = tl.arange(0, PIECES)
    best = tl.load(best_ptr + row * PIECES + p)
    index = tl.load(index_ptr + row * PIECES + p)
    top = tl.load(top_ptr + row * PIECES + p)
    total = tl.load(total_ptr + row * PIECES + p)
    winner = tl.max(best, 0)
    chosen = tl.min(tl.where(best == winner, index, 2147483647), 0)
    overall = tl.max(top, 0)
    lse = overall + tl.log(
        tl.sum(tl.where(top == float("-inf"), 0.0, total * tl.exp(top - overall)), 0)
    )
    picked = tl.load(logits_ptr + row.to(tl.int64) * logits_stride + chosen).to(tl.float32)
    tl.store(chosen_ptr + row, chosen.to(tl.int64))
    tl.store(logprob_ptr + row, picked - lse)


def pick(
    logits: torch.Tensor,
    noise: torch.Tensor | None = None,
    temperature: torch.Tensor | None = None,
    noise_rows: torch.Tensor | None = None,
    pieces: int = PIECES,
    block: int = BLOCK,
    **launch: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, vocab) logits (any float dtype, unit stride along the vocabulary) -> each row's
    chosen token and its log-softmax under the unscaled logits (fp32). Greedy without
    `noise`; else `gumbel_pick`'s race with Exp(1) `noise` (fp32, unit stride along the
    vocabulary) and a 0-d fp32 `temperature`, row r reading noise row `noise_rows[r]` (a
    compacted batch's share of the whole batch's draw) or row r. `pieces`, `block` and
    `launch` (Triton's num_warps; default LAUNCH) are for tuning."""
    rows, vocab = logits.shape
    greedy = noise is None
    device = logits.device
    best = torch.empty((rows, pieces), dtype=torch.float32, device=device)
    top, total = torch.empty_like(best), torch.empty_like(best)
    index = torch.empty((rows, pieces), dtype=torch.int32, device=device)
    _pick_pieces[(rows, pieces)](
        logits,
        logits if noise is None else noise,
        logits if noise_rows is None else noise_rows,
        logits if temperature is None else temperature,
        best,
        index,
        top,
        total,
        vocab,
        logits.stride(0),
        0 if noise is None else noise.stride(0),
        GREEDY=greedy,
        NOISE_ROWS=noise_rows is not None,
        PIECES=pieces,
        BLOCK=block,
        **(launch or LAUNCH),
    )
    chosen = torch.empty(rows, dtype=torch.long, device=device)
    logprob = torch.empty(rows, dtype=torch.float32, device=device)
    _pick_combine[(rows,)](
        logits, best, index, top, total, chosen, logprob, logits.stride(0), PIECES=pieces
    )
    return chosen, logprob
