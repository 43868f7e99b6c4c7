"""Checks of `silu_kernel`'s Triton kernel run by Triton's interpreter on CPU tensors.

Run as `TRITON_INTERPRET=1 python -m tests.rollout.silu_interpreted` (the interpreter is
chosen when the kernel is defined, so it needs a process of its own); prints one JSON
object. tests/rollout/test_rollout_silu_kernel.py runs it and judges the result.
"""

from __future__ import annotations

import json

import torch
import triton
import triton.language as tl

from trainer.rollout import silu_kernel
from trainer.rollout.decode_ops import silu_mul


def _halves(shape: tuple[int, ...], dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The gate and up halves of a gate/up matmul's output of `shape` (..., 2 * width)."""
    both = (torch.randn(shape, generator=torch.Generator().manual_seed(1)) * 4).to(dtype)
    width = shape[-1] // 2
    return both[..., :width], both[..., width:]


def kernel_errors() -> dict:
    """Largest difference from silu(gate) * up in fp32, rounded once, per case: a decode
    step's (rows, width) halves, a prefill's (rows, tokens, width), a width that is no
    multiple of the block, contiguous inputs, inputs whose rows cannot be flattened into
    a view (a transposed pair), and no rows at all."""
    cases = {
        "decode": _halves((6, 2 * 2 * silu_kernel.BLOCK), torch.float32),
        "prefill": _halves((3, 4, 2 * 300), torch.float32),
        "odd_width": _halves((5, 2 * (silu_kernel.BLOCK + 3)), torch.float16),
        "contiguous": tuple(t.contiguous() for t in _halves((4, 2 * 64), torch.float16)),
        "transposed": tuple(t.transpose(0, 1) for t in _halves((3, 7, 2 * 40), torch.float32)),
        "no_rows": _halves((0, 2 * 32), torch.float32),
    }
    errors = {}
    for name, (gate, up) in cases.items():
        got = silu_kernel.silu_mul(gate, up)
        want = (silu_mul(gate.float(), up.float())).to(gate.dtype)
        assert got.shape == want.shape and got.dtype == want.dtype, name
        errors[name] = float((got.float() - want.float()).abs().max()) if got.numel() else 0.0
    return errors


@triton.jit
def _gate_times_up(gate_ptr, up_ptr, out_ptr, width, gate_stride, up_stride, BLOCK: tl.constexpr):
    """A wrong kernel for the check to catch: gate * up, the SiLU forgotten."""
    row = tl.program_id(0).to(tl.int64)
    columns = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = columns < width
    gate = tl.load(gate_ptr + row * gate_stride + columns, mask=inside)
    up = tl.load(up_ptr + row * up_stride + columns, mask=inside)
    tl.store(out_ptr + row * width + columns, gate * up, mask=inside)


def self_check() -> dict:
    """`check` on the kernel (fp32, fp16), then on a wrong one."""
    out = {
        str(dtype): silu_kernel.check(torch.device("cpu"), dtype)
        for dtype in (
            torch.float32,
            torch.float16,
        )
    }
    silu_kernel._silu_mul = _gate_times_up
    out["no silu"] = silu_kernel.check(torch.device("cpu"), torch.float32)
    return out


if __name__ == "__main__":
    print(json.dumps({"kernel": kernel_errors(), "self_check": self_check()}))
