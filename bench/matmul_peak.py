"""Measured bf16 matmul peak of this GPU: the ceiling an MFU figure can honestly be read against.

The datasheet's dense bf16 rate (989 TFLOP/s for an H200 SXM) is not reached by any real
matmul; what cuBLAS gives on a large square product of random data is the practical ceiling.
Random data, not zeros: zeros run faster on some chips. Several input pairs are rotated so no
product runs from cache. Prints the median and best of --repeat timed products.

    python bench/matmul_peak.py              # 8192 x 8192 x 8192, bf16
    python bench/matmul_peak.py --size 16384 --json
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

DATASHEET_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0}


def datasheet_peak(device_name: str) -> float | None:
    """Dense bf16 TFLOP/s from the vendor's datasheet, where known for the device."""
    return next((v for k, v in DATASHEET_BF16_TFLOPS.items() if k in device_name), None)


def measure_matmul_tflops(
    size: int = 8192, repeat: int = 20, warmup: int = 5, pairs: int = 3
) -> dict[str, float]:
    """Median and best TFLOP/s of `size`^3 bf16 products on the current CUDA device."""
    generator = torch.Generator(device="cuda").manual_seed(0)
    inputs = [
        (
            torch.randn(size, size, device="cuda", dtype=torch.bfloat16, generator=generator),
            torch.randn(size, size, device="cuda", dtype=torch.bfloat16, generator=generator),
        )
        for _ in range(pairs)
    ]
    out = torch.empty(size, size, device="cuda", dtype=torch.bfloat16)
    for i in range(warmup):
        torch.matmul(*inputs[i % pairs], out=out)
    seconds = []
    for i in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.matmul(*inputs[i % pairs], out=out)
        end.record()
        end.synchronize()
        seconds.append(start.elapsed_time(end) / 1e3)
    flops = 2.0 * size**3
    return {
        "median_tflops": flops / statistics.median(seconds) / 1e12,
        "best_tflops": flops / min(seconds) / 1e12,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--json", action="store_true", help="print one JSON line instead of text")
    args = parser.parse_args()
    result = measure_matmul_tflops(args.size, args.repeat)
    name = torch.cuda.get_device_name()
    result.update(device=name, size=args.size, datasheet_tflops=datasheet_peak(name))
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"{name}: bf16 {args.size}^3 matmul, median {result['median_tflops']:.0f} TFLOP/s, "
        f"best {result['best_tflops']:.0f} (datasheet dense bf16: {result['datasheet_tflops']})"
    )


if __name__ == "__main__":
    main()
