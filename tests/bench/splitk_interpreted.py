"""bench/splitk_matmul.py's kernel run by Triton's interpreter on CPU tensors, against x @ w.T.

Run as `TRITON_INTERPRET=1 python -m tests.bench.splitk_interpreted` (the interpreter is
chosen when the kernel is defined, so it needs a process of its own); prints one JSON
object: the largest difference per case. tests/bench/test_bench_triton_kernels.py judges it.
"""

from __future__ import annotations

import json

import torch

from bench import splitk_matmul

# rows, out_features, in_features, config (block m, n, k, warps, stages), splits: one split
# (the result written directly), several, rows and outputs that fill no whole tile
CASES = [
    (32, 64, 128, (32, 32, 32, 4, 1), 1),
    (40, 96, 256, (32, 32, 64, 4, 1), 2),
    (17, 50, 192, (16, 32, 32, 4, 1), 3),
]


def errors() -> dict:
    generator = torch.Generator().manual_seed(0)
    out = {}
    for rows, out_features, in_features, config, splits in CASES:
        x = torch.randn((rows, in_features), generator=generator).half()
        weight = (torch.randn((out_features, in_features), generator=generator) / 16).half()
        want = x.float() @ weight.float().t()
        got = splitk_matmul.matmul(x, weight, config, splits)()
        partials = splitk_matmul.matmul(x, weight, config, splits, summed=False)()
        name = f"{rows}x{out_features}x{in_features}/{splits}"
        out[name] = {
            "error": float((got.float() - want).abs().max()),
            "shape": list(got.shape),
            "partials_error": float(
                (partials.float().reshape(-1, rows, out_features).sum(0) - want).abs().max()
            ),
        }
    return out


if __name__ == "__main__":
    print(json.dumps(errors()))
