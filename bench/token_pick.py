"""The per-step token pick: pick_kernel's Triton kernels against the torch ways of doing it.

Each decode step picks one token per row from (rows, vocab) logits by the Gumbel-max race at
temperature --temperature and reports its log-prob. Rows: the eager ops (`sample_next` and
`chosen_logprob` on the fp32 logits, as the unfused engine runs them), `gumbel_pick`
compiled by torch.compile (the fused picker before pick_kernel), and `pick_kernel.pick`,
each given the same bf16 logits and the same Exp(1) noise, which is drawn outside the
timing (its draw, the same for all of them, is timed on its own line). The table gives
microseconds per pick and how many rows chose another token than the eager ops. --sweep
also times other piece counts, block sizes and warps of the kernel: how its defaults were
chosen.

1xH200, qwen2-1.5b's vocabulary:
  python bench/token_pick.py
  python bench/token_pick.py --sweep
CPU smoke run (Triton's interpreter, the kernel and the eager ops; the times mean nothing):
  TRITON_INTERPRET=1 python bench/token_pick.py --device cpu --rows 4 --vocab 3000 --repeat 1
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.decode_attention import print_fastest
from trainer.rollout import pick_kernel
from trainer.rollout.base import SamplingParams
from trainer.rollout.fused_sampling import gumbel_pick
from trainer.rollout.sampling import chosen_logprob, sample_next


def microseconds(fn: Callable[[], object], device: str, repeat: int) -> float:
    """Microseconds per call, after two warm-up calls."""
    for _ in range(2):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeat * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", default="256,128", help="comma-separated row counts")
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--sweep", action="store_true", help="also time other configurations")
    args = parser.parse_args()
    device, dtype = args.device, torch.bfloat16 if args.device == "cuda" else torch.float32
    generator = torch.Generator(device=device).manual_seed(0)
    params = SamplingParams(temperature=args.temperature, logprobs=True)
    temperature = torch.tensor(args.temperature, device=device)
    lines = []
    for rows in (int(r) for r in args.rows.split(",")):
        logits = (torch.randn(rows, args.vocab, generator=generator, device=device) * 3).to(dtype)
        noise = torch.empty(rows, args.vocab, device=device).exponential_(generator=generator)
        seed = int(torch.randint(0, 2**31, (1,), generator=generator, device=device))

        def eager(logits=logits) -> tuple[torch.Tensor, torch.Tensor]:
            # sample_next draws its own noise: the draw's time is on its own line
            draw = torch.Generator(device=device).manual_seed(seed)
            chosen = sample_next(logits.float(), params, draw)
            return chosen, chosen_logprob(logits.float(), chosen)

        expected, _ = eager()
        drawn = torch.empty_like(noise).exponential_(  # sample_next's draw at this seed
            generator=torch.Generator(device=device).manual_seed(seed)
        )
        line: dict = {"rows": rows}
        line["noise_us"] = microseconds(
            lambda: noise.exponential_(generator=generator), device, args.repeat
        )
        line["eager_us"] = microseconds(eager, device, args.repeat)
        candidates = {"kernel": lambda: pick_kernel.pick(logits, drawn, temperature)}
        if device == "cuda":
            compiled = torch.compile(gumbel_pick, fullgraph=True)
            candidates["compiled"] = lambda: compiled(logits, drawn, temperature)
        for name, run in candidates.items():
            line[f"{name}_us"] = microseconds(run, device, args.repeat)
            line[f"{name}_differ"] = int((run()[0] != expected).sum())
        if args.sweep:
            timings = []
            for pieces, block, warps in itertools.product(
                (8, 16, 32, 64), (512, 1024, 2048), (4, 8)
            ):
                run = partial(
                    pick_kernel.pick,
                    logits,
                    drawn,
                    temperature,
                    pieces=pieces,
                    block=block,
                    num_warps=warps,
                )
                us = microseconds(run, device, args.repeat)
                timings.append((us, {"pieces": pieces, "block": block, "num_warps": warps}))
            line["fastest"] = sorted(timings, key=lambda t: t[0])[:4]
        lines.append(line)
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    print(
        f"\nvocabulary {args.vocab}, {str(dtype).removeprefix('torch.')} logits, {name}; "
        "us per pick\n"
    )
    print(
        "| rows | noise draw | eager ops, their draw included | torch.compile | pick_kernel "
        "| rows differing (compile, kernel) |"
    )
    print("|---|---|---|---|---|---|")
    for line in lines:
        compiled = f"{line['compiled_us']:.1f}" if "compiled_us" in line else "-"
        differ = f"{line.get('compiled_differ', '-')}, {line['kernel_differ']}"
        print(
            f"| {line['rows']} | {line['noise_us']:.1f} | {line['eager_us']:.1f} | {compiled} | "
            f"{line['kernel_us']:.1f} | {differ} |"
        )
    print_fastest(lines, lambda line: f"{line['rows']} rows")
    print(json.dumps({"lines": lines}))


if __name__ == "__main__":
    main()
