"""A decode step's weight matmuls at rollout row counts: cuBLAS against its alternatives.

Each decode step multiplies the (rows, hidden) activations by every weight matrix once.
At a few hundred rows these are short, wide or deep products whose speed decides the
step's matmul time. For each of qwen2-1.5b's shapes (q/k/v and gate/up fused as the hf
engine runs them, o_proj, down_proj, lm_head) the table gives microseconds per product
and TFLOP/s for: `F.linear` (what the engine calls: cuBLAS), the same product computed
transposed (W @ x.T), torch.compile with mode="max-autotune-no-cudagraphs" (Triton
templates against cuBLAS, the fastest kept), PyTorch's TunableOp (cuBLASLt algorithms
searched) and a split-K Triton matmul (bench/splitk_matmul.py: the fastest of its tile
configs and split counts, the sum of its fp32 partials included; the JSON has its time
without the sum and its config). One weight per layer (28, like the model; 4 for the
lm_head), so nothing is served from L2; each product is a CUDA graph replay of all of them.

1xH200:
  python bench/decode_matmuls.py
  python bench/decode_matmuls.py --rows 256 --no-autotune --no-splitk
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import splitk_matmul
from bench.decode_attention import seconds_per_call

# name: (out_features, in_features, bias) for qwen2-1.5b (hidden 1536, intermediate 8960,
# 12 + 2 + 2 heads of 128, vocabulary 151936)
SHAPES = {
    "qkv": (2048, 1536, True),
    "o_proj": (1536, 1536, False),
    "gate_up": (17920, 1536, False),
    "down_proj": (1536, 8960, False),
    "lm_head": (151936, 1536, False),
}


def products(
    way: str, x: torch.Tensor, weights: list[torch.Tensor], biases: list
) -> Callable[[], None]:
    """All the layers' products of `x`, the `way` named."""
    if way == "transposed":

        def run() -> None:
            for weight, bias in zip(weights, biases):
                out = torch.mm(weight, x.t()).t()
                if bias is not None:
                    out = out + bias

        return run
    linear = F.linear
    if way == "max-autotune":
        linear = torch.compile(F.linear, mode="max-autotune-no-cudagraphs", dynamic=False)

    def run() -> None:
        for weight, bias in zip(weights, biases):
            linear(x, weight, bias)

    return run


def fastest_splitk(x: torch.Tensor, weights: list[torch.Tensor], repeat: int) -> dict:
    """The split-K Triton matmul's fastest config and split count for x @ weight.T: us per
    product with the partials' sum ("splitk") and without it, and which config it was."""
    best: dict = {}
    for config in splitk_matmul.CONFIGS:
        for splits in splitk_matmul.splits_for(x.shape[1], config[2]):
            calls = [splitk_matmul.matmul(x, weight, config, splits) for weight in weights]
            seconds = seconds_per_call(lambda: [call() for call in calls], "cuda", repeat)
            if not best or seconds < best["seconds"]:
                best = {"seconds": seconds, "config": config, "splits": splits}
    config, splits = best["config"], best["splits"]
    bare = [splitk_matmul.matmul(x, w, config, splits, summed=False) for w in weights]
    without_sum = seconds_per_call(lambda: [call() for call in bare], "cuda", repeat)
    return {
        "splitk": best["seconds"] / len(weights) * 1e6,
        "splitk_without_sum": without_sum / len(weights) * 1e6,
        "splitk_config": {"block_mnk_warps_stages": config, "splits": splits},
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", default="256,128", help="comma-separated row counts")
    parser.add_argument("--layers", type=int, default=28)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--no-autotune", action="store_true", help="skip max-autotune")
    parser.add_argument("--no-splitk", action="store_true", help="skip the split-K Triton matmul")
    args = parser.parse_args()
    ways = ["linear", "transposed"] + ([] if args.no_autotune else ["max-autotune"])
    columns = [*ways, "tunableop"] + ([] if args.no_splitk else ["splitk"])
    lines = []
    for rows in (int(r) for r in args.rows.split(",")):
        for name, (out_features, in_features, has_bias) in SHAPES.items():
            count = 4 if name == "lm_head" else args.layers
            weights = [
                torch.randn(out_features, in_features, device="cuda", dtype=torch.bfloat16)
                for _ in range(count)
            ]
            biases = [
                torch.randn(out_features, device="cuda", dtype=torch.bfloat16) if has_bias else None
                for _ in range(count)
            ]
            x = torch.randn(rows, in_features, device="cuda", dtype=torch.bfloat16)
            flops = 2 * rows * out_features * in_features
            line: dict = {"rows": rows, "shape": name}
            for way in ways:
                seconds = seconds_per_call(products(way, x, weights, biases), "cuda", args.repeat)
                line[way] = seconds / count * 1e6
            torch.cuda.tunable.enable(True)
            torch.cuda.tunable.tuning_enable(True)
            products("linear", x, weights[:1], biases[:1])()  # tunes this shape
            seconds = seconds_per_call(products("linear", x, weights, biases), "cuda", args.repeat)
            torch.cuda.tunable.enable(False)
            line["tunableop"] = seconds / count * 1e6
            if not args.no_splitk:
                line.update(fastest_splitk(x, weights, args.repeat))
            line["tflops"] = {k: flops / (line[k] * 1e-6) / 1e12 for k in columns}
            lines.append(line)
            del weights
            torch.cuda.empty_cache()
    print(f"\nqwen2-1.5b decode matmuls, bf16, {torch.cuda.get_device_name()}")
    print("us per product (TFLOP/s)\n")
    print("| rows | product | " + " | ".join(columns) + " |")
    print("|---|---|" + "---|" * len(columns))
    for line in lines:
        cells = " | ".join(f"{line[c]:.1f} ({line['tflops'][c]:.0f})" for c in columns)
        print(f"| {line['rows']} | {line['shape']} | {cells} |")
    print(json.dumps({"lines": lines}))


if __name__ == "__main__":
    main()
