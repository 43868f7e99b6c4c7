"""Would decoding the batch as slices on concurrent CUDA streams hide memory-bound work?

The hf engine runs a decode step's kernels one after another: the weight matmuls (compute-
bound at 256 rows), then the attention and the element-wise kernels (memory-bound), layer
by layer. Splitting the batch and running the slices side by side, each on its own CUDA
stream, lets one slice's attention, norms and small projections (which fill few of the
SMs at these row counts) run while another slice's matmuls run, at the price of every
weight matmul running once per slice at fewer rows. This measures it with the engine's own
decoder (`StaticCacheDecoder`: static cache, CUDA graphs, the Triton decode kernels), one
decoder per slice, against one batch:

* `one batch`: one decoder over all rows (what the engine does);
* `two halves, one after the other`: two decoders over half the rows each, on one stream;
* `two halves on two streams`: each decoder's graph replayed on its own stream, the
  streams joined after every step, so the GPU runs the two halves' kernels concurrently
  wherever SMs are free (on CUDA only).

Each row is milliseconds per decode step over `--steps` steps after a `--prompt-len`-token
prefill (the decoded tokens do not change a step's cost, so every step feeds token 1).
`bench/decode_matmuls.py --rows N` times the weight matmuls of a step at N rows.

1xH200:
  python bench/decode_overlap.py --shape qwen2-1.5b --rows 256 --steps 256 --repeat 2
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


def seconds_per_step(
    model, prompts: list[list[int]], parts: int, steps: int, device: str, concurrent: bool
) -> float:
    """Wall seconds per decode step of `parts` decoders, one after the other or (`concurrent`)
    each on its own stream; the first two steps (graph capture) are not timed."""
    made = decoders(model, prompts, parts, steps)
    token = [torch.ones(len(prompts) // parts, dtype=torch.long, device=device) for _ in made]
    main = torch.cuda.current_stream() if concurrent else None
    streams = [torch.cuda.Stream() for _ in made] if concurrent else []

    def step() -> None:
        if not streams:
            for decoder, tokens in zip(made, token):
                decoder.decode(tokens)
            return
        for stream in streams:
            stream.wait_stream(main)
        for decoder, tokens, stream in zip(made, token, streams):
            with torch.cuda.stream(stream):
                decoder.decode(tokens)
        for stream in streams:
            main.wait_stream(stream)

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
    setups = [
        ("one batch", 1, False),
        ("two halves, one after the other", 2, False),
    ]
    if args.device == "cuda":  # streams: CUDA's
        setups.append(("two halves on two streams", 2, True))
    rows = []
    with torch.inference_mode():
        for name, parts, concurrent in setups:
            best = min(
                seconds_per_step(model, prompts, parts, args.steps, args.device, concurrent)
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
