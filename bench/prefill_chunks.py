"""The hf engine's prefill at several chunk sizes: wall seconds and peak memory.

The static-cache decoder prefills its prompts in chunks of at most `prefill_tokens` padded
tokens (trainer/rollout/static_cache.py, PREFILL_TOKENS). Each chunk is a pass over the
layers of hundreds of kernel launches; its matmul attention holds (rows, heads, T, T) fp32
scores. This times `StaticCacheDecoder.prefill` alone (the prompts
copied in, every chunk's forward, the cache filled, the first logits) for each size in
--tokens, on bench/rollout.py's model and prompts: one untimed run, then the best of
--repeat, and the peak memory allocated over those runs.

1xH200:
  python bench/prefill_chunks.py --shape qwen2-1.5b --prompts 256 --prompt-len 128
CPU smoke run:
  python bench/prefill_chunks.py --shape tiny --prompts 4 --prompt-len 16 --device cpu \
    --dtype fp32 --tokens 16,64
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.rollout import PAD, add_workload_arguments, build, make_prompts, timed
from trainer.rollout.static_cache import PREFILL_TOKENS, StaticCacheDecoder


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_workload_arguments(parser)  # --new-tokens sizes the decode cache here
    parser.add_argument("--tokens", default=f"4096,8192,16384,{PREFILL_TOKENS},65536")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    model = build(args.shape, dtype, args.device)
    prompts = make_prompts(args.prompts, args.prompt_len, model.config.vocab_size)
    longest = max(len(p) for p in prompts)
    cuda = args.device == "cuda"
    lines = []
    with torch.inference_mode():
        for tokens in (int(t) for t in args.tokens.split(",")):
            decoder = StaticCacheDecoder(model, PAD, prefill_tokens=tokens)
            run = partial(decoder.prefill, prompts, 1, args.new_tokens)
            timed(run, args.device)
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            best = min(timed(run, args.device)[0] for _ in range(args.repeat))
            rows = max(1, tokens // longest)
            lines.append(
                {
                    "tokens": tokens,
                    "rows_per_chunk": min(rows, len(prompts)),
                    "chunks": -(-len(prompts) // rows),
                    "best_s": best,
                    "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
                    "default": tokens == PREFILL_TOKENS,
                }
            )
            decoder.release()
    print(f"\nprefill of {len(prompts)} prompts of up to {longest} tokens, {args.shape}, {dtype}")
    print("| tokens per chunk | rows per chunk | chunks | best s | peak GiB |")
    print("|---|---|---|---|---|")
    for line in lines:
        peak = "-" if line["peak_gib"] is None else f"{line['peak_gib']:.1f}"
        mark = " (default)" if line["default"] else ""
        print(
            f"| {line['tokens']}{mark} | {line['rows_per_chunk']} | {line['chunks']} | "
            f"{line['best_s']:.3f} | {peak} |"
        )
    print(json.dumps({"lines": lines}))


if __name__ == "__main__":
    main()
