"""Decode-step attention kernels: split_kv's Triton kernel against FlashAttention-2.

One decode step of a left-padded static cache (rows, width, kv_heads, dim): each row's one
query token per head attends over its filled slots (left padding of 0-63 slots per row, up
to the step's slot). Every layer has its own cache, as in a model, so nothing is served from
L2; a CUDA graph of --layers calls is replayed and timed, so launch costs are what they are
inside the decoder's graphs. The table gives microseconds per layer, the bytes of keys and
values read per second (each row's filled slots, once), and the largest difference of the
split kernel's result from FlashAttention-2's. --sweep also times other piece counts,
block sizes, warps and pipeline stages of the split kernel and prints the fastest few per
line: how split_kv's defaults were chosen.

1xH200, qwen2-1.5b's attention (12 query heads, 2 KV heads, dim 128):
  python bench/decode_attention.py
  python bench/decode_attention.py --sweep
CPU smoke run (Triton's interpreter, split kernel only; the times mean nothing):
  TRITON_INTERPRET=1 python bench/decode_attention.py --device cpu --dtype fp32 \\
    --rows 4 --heads 4 --kv-heads 2 --dim 16 --width 64 --slots 20,40 --layers 2
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer.rollout import flash_decode, split_kv
from trainer.rollout.decode_ops import pack_queries


def seconds_per_call(fn: Callable[[], None], device: str, repeat: int) -> float:
    """Seconds per call of `fn`: replays of its CUDA graph on a GPU, plain calls elsewhere."""
    if device != "cuda":
        fn()
        start = time.perf_counter()
        for _ in range(repeat):
            fn()
        return (time.perf_counter() - start) / repeat
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(repeat):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return begin.elapsed_time(end) / 1e3 / repeat


def measure(args: argparse.Namespace, rows: int, slot: int, caches, q, pad) -> dict:
    """One (rows, slot) line: FlashAttention-2 (on CUDA) and the split kernel, and with
    --sweep the fastest split configurations."""
    width, kv_heads, dim = args.width, args.kv_heads, args.dim
    group = args.heads // kv_heads
    scale = dim**-0.5
    slot_t = torch.tensor([slot], device=args.device)
    filled = int((slot + 1 - pad).sum())
    kv_bytes = filled * kv_heads * dim * 2 * caches[0][0].element_size()
    line: dict = {"rows": rows, "slot": slot, "kv_mb_per_layer": kv_bytes / 1e6}

    def per_layer(fn: Callable[[], None]) -> float:
        return seconds_per_call(fn, args.device, args.repeat) / args.layers

    def split_call(**config) -> Callable[[], None]:
        def run() -> None:
            for keys, values in caches:
                split_kv.attend(q, keys, values, pad, slot_t, scale, **config)

        return run

    split_s = per_layer(split_call())
    line["split_us"], line["split_tb_s"] = split_s * 1e6, kv_bytes / split_s / 1e12
    got = split_kv.attend(q, *caches[0], pad, slot_t, scale)
    if args.device == "cuda":
        first = torch.arange(rows, device=args.device) * width + pad
        end = torch.tensor([rows * width], device=args.device)
        starts = torch.cat([first, end]).to(torch.int32)
        used = (slot + 1 - pad).to(torch.int32)
        cum_q = torch.arange(rows + 1, dtype=torch.int32, device=args.device) * group
        packed = pack_queries(q.view(rows, args.heads, 1, dim), kv_heads)

        def flash() -> None:
            for keys, values in caches:
                flash_decode.attend(packed, keys, values, cum_q, starts, used, width, scale)

        flash_s = per_layer(flash)
        line["flash_us"], line["flash_tb_s"] = flash_s * 1e6, kv_bytes / flash_s / 1e12
        want = flash_decode.attend(packed, *caches[0], cum_q, starts, used, width, scale)
        line["max_diff"] = float((got.float() - want.view_as(got).float()).abs().max())
    if args.sweep:
        timings = []
        for pieces, block_n, warps, stages in itertools.product(
            (1, 2, 4, 8, 16), (16, 32, 64), (2, 4), (1, 2, 3)
        ):
            config = dict(pieces=pieces, block_n=block_n, num_warps=warps, num_stages=stages)
            timings.append((per_layer(split_call(**config)) * 1e6, config))
        line["fastest"] = sorted(timings, key=lambda t: t[0])[:4]
    return line


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", default="256,128", help="comma-separated row counts")
    parser.add_argument("--slots", default="191,383,639", help="comma-separated step slots")
    parser.add_argument("--width", type=int, default=640, help="cache slots per row")
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--layers", type=int, default=28, help="caches (one per layer)")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    parser.add_argument("--sweep", action="store_true", help="also time other configurations")
    args = parser.parse_args()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    generator = torch.Generator(device=args.device).manual_seed(0)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=generator, device=args.device).to(dtype)

    slots = [int(s) for s in args.slots.split(",")]
    lines = []
    for rows in (int(r) for r in args.rows.split(",")):
        cache_shape = (rows, args.width, args.kv_heads, args.dim)
        caches = [(randn(*cache_shape), randn(*cache_shape)) for _ in range(args.layers)]
        q = randn(rows, args.heads, args.dim)
        padding = min(64, min(slots) + 1)  # every row has at least one filled slot
        pad = torch.randint(0, padding, (rows,), generator=generator, device=args.device)
        for slot in slots:
            lines.append(measure(args, rows, slot, caches, q, pad))
        del caches
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(
        f"\n{args.heads} query heads, {args.kv_heads} KV heads, dim {args.dim}, cache width "
        f"{args.width}, {args.dtype}, {name}; us per layer (KV read TB/s)\n"
    )
    print("| rows | slot | KV MB/layer | FlashAttention-2 | split_kv | speed-up | max diff |")
    print("|---|---|---|---|---|---|---|")
    for line in lines:
        flash = f"{line['flash_us']:.1f} ({line['flash_tb_s']:.2f})" if "flash_us" in line else "-"
        ratio = f"{line['flash_us'] / line['split_us']:.2f}x" if "flash_us" in line else "-"
        diff = f"{line['max_diff']:.3g}" if "max_diff" in line else "-"
        print(
            f"| {line['rows']} | {line['slot']} | {line['kv_mb_per_layer']:.1f} | {flash} | "
            f"{line['split_us']:.1f} ({line['split_tb_s']:.2f}) | {ratio} | {diff} |"
        )
    print_fastest(lines, lambda line: f"{line['rows']} rows, slot {line['slot']}")
    print(json.dumps({"lines": lines}))


def print_fastest(lines: list[dict], where: Callable[[dict], str]) -> None:
    """A --sweep's fastest configurations, a line per table line that has them."""
    for line in lines:
        if "fastest" in line:
            best = ", ".join(f"{us:.1f} us {config}" for us, config in line["fastest"])
            print(f"fastest at {where(line)}: {best}")


if __name__ == "__main__":
    main()
