"""Would decoding the batch as two halves, overlapped, hide the decode step's memory-bound work?

The hf engine runs a decode step's kernels one after another: the weight matmuls (compute-
bound at 256 rows), then the attention and the element-wise kernels (memory-bound), layer
by layer. Splitting the batch in two and running the halves side by side (two streams)
would let one half's attention run while the other half's matmuls run, at the price of
every weight matmul running twice at half the rows. Overlapped, two halves cannot take
less than their matmuls alone; this measures the two halves one after the other, with the
engine's own decoder (`StaticCacheDecoder`: static cache, CUDA graphs, the Triton decode
kernels), against one batch:

* `one batch`: one decoder over all rows (what the engine does);
* `two halves, one stream`: two decoders over half the rows each, one after the other.

Each row is milliseconds per decode step over `--steps` steps after a `--prompt-len`-token
prefill (the decoded tokens do not change a step's cost, so every step feeds token 1).
`bench/decode_matmuls.py --rows N` times the weight matmuls of a step at N rows.

1xH200:
  python bench/decode_overlap.py --shape qwen2-1.5b --rows 256 --steps 256 --repeat 1
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.rollout import build, make_prompts
from trainer.rollout.static_cache import StaticCacheDecoder

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def decoders(model, prompts: list[list[int]], parts: int, steps: int) -> list[StaticCacheDecoder]:
    """`parts` decoders, each prefilled with its share of `prompts`, room for `steps` tokens."""
    share = len(prompts) // parts
    made = []
    for part in range(parts):
        decoder = StaticCacheDecoder(model, pad_token_id=0, float_logits=False)
        decoder.prefill(prompts[part * share : (part + 1) * share], 1, steps + 1)
        made.append(decoder)
    return made


def seconds_per_step(model, prompts: list[list[int]], parts: int, steps: int, device: str) -> float:
    """Wall seconds per decode step of `parts` decoders run one after the other; the first
    two steps (graph capture) are not timed."""
    made = decoders(model, prompts, parts, steps)
    token = [torch.ones(len(prompts) // parts, dtype=torch.long, device=device) for _ in made]

    def step() -> None:
        for decoder, tokens in zip(made, token):
            decoder.decode(tokens)

    for _ in range(2):
        step()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(steps - 2):
        step()
    synchronize(device)
    elapsed = (time.perf_counter() - start) / (steps - 2)
    for decoder in made:
        decoder.release()
    return elapsed


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shape", default="qwen2-1.5b")
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--steps", type=int, default=384)
    parser.add_argument("--repeat", type=int, default=2, help="best of this many runs per row")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    args = parser.parse_args()
    if args.rows % 2:
        parser.error("--rows must be even (two halves)")
    model = build(args.shape, DTYPES[args.dtype], args.device)
    prompts = [
        p[:1] + [1] * (args.prompt_len - 1)  # every prompt at full length: one cache width
        for p in make_prompts(args.rows, args.prompt_len, model.config.vocab_size)
    ]
    setups = [("one batch", 1), ("two halves, one stream", 2)]
    rows = []
    with torch.inference_mode():
        for name, parts in setups:
            best = min(
                seconds_per_step(model, prompts, parts, args.steps, args.device)
                for _ in range(args.repeat)
            )
            rows.append({"setup": name, "ms_per_step": best * 1e3})
            print(f"{name}: {best * 1e3:.3f} ms a step", file=sys.stderr, flush=True)
    base = rows[0]["ms_per_step"]
    print(f"{args.shape}, {args.rows} rows, slots {args.prompt_len}-{args.prompt_len + args.steps}")
    print("| setup | ms per decode step | x one batch |")
    print("|---|---|---|")
    for row in rows:
        row["ratio"] = row["ms_per_step"] / base
        print(f"| {row['setup']} | {row['ms_per_step']:.3f} | {row['ratio']:.2f} |")
    print(json.dumps({"rows": rows}))


if __name__ == "__main__":
    main()
