"""SiLU(gate) * up as one Triton kernel: the decode step's element-wise op with the most bytes.

Between a layer's gate/up matmul and its down projection, each row's gate and up halves
(two runs of `intermediate_size` values in the gate/up matmul's output) become
silu(gate) * up. At qwen2-1.5b's 8,960 and 256 rows that is 9.2 MB read and 4.6 MB
written per layer, more than any other element-wise op of the step moves. Here a program
reads a block of one row's gate and up values as two contiguous runs and writes one, so
each load is a wide coalesced read. On 1xH200 the decode step's element-wise work went
from 0.464 ms with torch.compile's fused op for it to 0.398 ms with this kernel
(`bench/rollout.py --profile`, runs 10 and 11 of docs/benchmarks.md).

The result is computed in fp32 and rounded once to the inputs' dtype, as torch.compile's
fused op computes it (eager PyTorch rounds silu(gate) to the dtype before the product).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

BLOCK = 1024  # values of a row per program
LAUNCH = {"num_warps": 4}


@triton.jit
def _silu_mul(gate_ptr, up_ptr, out_ptr, width, gate_stride, up_stride, BLOCK: tl.constexpr):
    """Program (row, block): out[row, block] = silu(gate[row, block]) * up[row, block]."""
    row = tl.program_id(0).to(tl.int64)
    columns = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = columns < width
    gate = tl.load(gate_ptr + row * gate_stride + columns, mask=inside).to(tl.float32)
    up = tl.load(up_ptr + row * up_stride + columns, mask=inside).to(tl.float32)
    out = gate * tl.sigmoid(gate) * up
    tl.store(out_ptr + row * width + columns, out.to(out_ptr.dtype.element_ty), mask=inside)


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up for `gate` and `up` of one shape (..., width), each with unit stride
    along width (the halves of a gate/up matmul's output are); a new contiguous tensor."""
    if gate.shape != up.shape:
        raise ValueError(f"silu_mul: gate {tuple(gate.shape)} and up {tuple(up.shape)} differ")
    width = gate.shape[-1]
    # reshape keeps a view where the leading dimensions allow it; where not, it copies, and
    # the copy's row stride is what the kernel is given
    gate_rows, up_rows = gate.reshape(-1, width), up.reshape(-1, width)
    if gate_rows.stride(-1) != 1 or up_rows.stride(-1) != 1:
        gate_rows, up_rows = gate_rows.contiguous(), up_rows.contiguous()
    out = torch.empty(gate.shape, dtype=gate.dtype, device=gate.device)
    rows = gate_rows.shape[0]
    if rows:
        _silu_mul[(rows, triton.cdiv(width, BLOCK))](
            gate_rows,
            up_rows,
            out,
            width,
            gate_rows.stride(0),
            up_rows.stride(0),
            BLOCK=BLOCK,
            **LAUNCH,
        )
    return out


def check(device: torch.device, dtype: torch.dtype) -> str | None:
    """None when the kernel gives silu(gate) * up, in fp32 rounded once, to within a unit in
    the last place of `dtype` (of 1.0 for values under 1, and a few more of fp32's, where
    implementations of exp differ), on the strided halves of a small gate/up output on
    `device` (a width that is no multiple of BLOCK, three dimensions); else why not."""
    width = BLOCK + 76
    generator = torch.Generator(device=device).manual_seed(0)
    both = (torch.randn((3, 5, 2 * width), generator=generator, device=device) * 4).to(dtype)
    gate, up = both[..., :width], both[..., width:]
    try:
        got = silu_mul(gate, up).float()
    except Exception as err:  # Triton cannot compile or launch here
        return f"{type(err).__name__}: {err}"
    want = (F.silu(gate.float()) * up.float()).to(dtype).float()
    eps = torch.finfo(dtype).eps + 8 * torch.finfo(torch.float32).eps
    if bool(((got - want).abs() > eps * want.abs().clamp(min=1.0)).any()):
        return f"off by up to {float((got - want).abs().max()):.3g} from silu(gate) * up"
    return None
