"""Token cross-entropy over a large vocabulary, summed over labelled positions.

`linear_cross_entropy_sum(hidden, weight, targets)` is what the trainer calls: the LM head and the
loss in one step. The plain path builds the full `[tokens, vocab]` logits and casts them to fp32,
which for a 152k vocabulary and 8k tokens is about 5 GB per micro-batch. The chunked path never
holds more than one chunk of logits: for each chunk it computes logits, the fp32 log-softmax and the
gradients of the loss with respect to the hidden states and the head weight during the forward pass,
keeps only those gradients (sizes of `hidden` and `weight`), and hands them back scaled in backward.
The loss is a sum, so its gradient is linear in the upstream gradient and computing it early is
exact.

Targets are already shifted (target[t] is the token that follows position t) and -100
marks positions without a loss, so packed documents need no special handling here.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100


def plain_cross_entropy_sum(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """Reference path: full logits in fp32, as Hugging Face's `ForCausalLMLoss` does."""
    logits = F.linear(hidden, weight).float()
    return F.cross_entropy(
        logits.view(-1, logits.shape[-1]),
        targets.reshape(-1),
        ignore_index=IGNORE_INDEX,
        reduction="sum",
    )


class _ChunkedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int
    ) -> torch.Tensor:
        """The summed loss of the labelled rows, and its gradients for `hidden` and `weight`
        computed here, `chunk` rows of logits at a time, so no `[tokens, vocab]` tensor is
        ever whole (exact: the loss is a sum, module docstring). The weight's gradient adds
        up in fp32 over the chunks, where bf16 would round away each chunk's small share."""
        # Every matmul runs in the compute dtype (bf16 on GPU, fp32 accumulation inside the
        # kernel); only the softmax is fp32. A fp32 weight-gradient matmul is many times
        # slower on tensor cores. Rows without a label are
        # masked arithmetically (zeroed hidden rows, zeroed gradient rows) rather than
        # selected with a boolean index, which would stall on a device-to-host sync.
        flat_hidden = hidden.reshape(-1, hidden.shape[-1])
        flat_targets = targets.reshape(-1)
        needs_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        grad_hidden = torch.empty_like(flat_hidden) if needs_grad else None
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if needs_grad else None
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        for start in range(0, flat_hidden.shape[0], chunk):
            labels = flat_targets[start : start + chunk]
            keep = (labels != IGNORE_INDEX).unsqueeze(1)
            safe_labels = labels.clamp(min=0).unsqueeze(1)
            rows = flat_hidden[start : start + chunk]
            log_probs = torch.log_softmax(rows @ weight.t(), dim=-1, dtype=torch.float32)
            total -= log_probs.gather(1, safe_labels).masked_fill_(~keep, 0.0).sum()
            if needs_grad:
                assert grad_hidden is not None and grad_weight is not None  # made when needs_grad
                # d(loss)/d(logits) = softmax - onehot; rows without a label are zeroed below.
                probs = log_probs.exp_()
                probs.scatter_add_(
                    1, safe_labels, torch.full_like(safe_labels, -1.0, dtype=probs.dtype)
                )
                grad_logits = probs.to(weight.dtype)
                del log_probs, probs
                grad_hidden[start : start + chunk] = (grad_logits @ weight).masked_fill_(~keep, 0.0)
                grad_weight += grad_logits.t() @ rows.masked_fill(~keep, 0.0)
        ctx.weight_dtype = weight.dtype
        if needs_grad:
            assert grad_hidden is not None
            ctx.save_for_backward(grad_hidden.view_as(hidden), grad_weight)
        return total

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        grad_hidden, grad_weight = ctx.saved_tensors
        scale = grad_output.to(torch.float32)
        return (
            (grad_hidden * scale).to(grad_hidden.dtype) if ctx.needs_input_grad[0] else None,
            (grad_weight * scale).to(ctx.weight_dtype) if ctx.needs_input_grad[1] else None,
            None,
            None,
        )


def chunked_cross_entropy_sum(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk_tokens: int = 2048
) -> torch.Tensor:
    """Sum of token losses, computed `chunk_tokens` rows at a time (see module docstring)."""
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    return _ChunkedLinearCrossEntropy.apply(hidden, weight, targets, chunk_tokens)


def liger_cross_entropy_sum(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """liger-kernel's fused linear cross-entropy (Triton): the same chunk-at-a-time idea as
    the chunked path, with the softmax and its gradient in one kernel per chunk."""
    from liger_kernel.transformers.functional import (
        liger_fused_linear_cross_entropy,
    )

    flat = hidden.reshape(-1, hidden.shape[-1])
    return liger_fused_linear_cross_entropy(
        flat, weight, targets.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum"
    )


def linear_cross_entropy_sum(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    mode: str = "chunked",
    chunk_tokens: int = 2048,
) -> torch.Tensor:
    """The summed (not mean) cross-entropy of `hidden @ weight.T` against the already shifted
    `targets`, by `mode` ("chunked", "plain", "liger"): the SFT step scales it by the target
    count of the whole global batch (every rank, every micro-batch), which a mean per
    micro-batch would weigh wrongly. `chunk_tokens` is read by "chunked" only."""
    if mode == "plain":
        return plain_cross_entropy_sum(hidden, weight, targets)
    if mode == "chunked":
        return chunked_cross_entropy_sum(hidden, weight, targets, chunk_tokens)
    if mode == "liger":
        return liger_cross_entropy_sum(hidden, weight, targets)
    raise ValueError(f"unknown loss mode {mode!r}: choose chunked, plain or liger")
