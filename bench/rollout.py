"""Rollout throughput: the hf engine (static KV cache + CUDA graphs) vs `model.generate`, plain and
with transformers' static cache + torch.compile (`cache_implementation="static"`).

Same random-init model of a public shape, same prompts (random token ids, lengths between
half and all of --prompt-len, left-padded), sampling at temperature 1, every sequence
generating exactly --new-tokens tokens (no EOS), all prompts in one batch. Each engine runs
once untimed (CUDA-graph capture, cuBLAS and allocator warm-up), then --repeat timed runs;
the table shows the best, generated tokens/s, the ratio to `generate` (the baseline), and the
fraction of the decode bandwidth limit: the bytes every decode step must read (all weights
once, plus each sequence's KV cache so far), summed over the steps, over --bandwidth.
A short greedy check reports how many of the first tokens the two agree on (bf16 numerics
may part ways after a near tie; a wrong decoder parts at once).

1xH200 (the issue's target):
  python bench/rollout.py --shape qwen2-1.5b --prompts 256 --prompt-len 128 --new-tokens 512
CPU smoke run:
  python bench/rollout.py --shape tiny --prompts 4 --prompt-len 16 --new-tokens 8 \
    --device cpu --dtype fp32
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer.config import ModelConfig
from trainer.model import build_hf_config
from trainer.rollout.base import SamplingParams
from trainer.rollout.hf import HFRolloutEngine
from trainer.tiny import build_tokenizer

PAD = 0


def build(shape: str, dtype: torch.dtype, device: str) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    config = build_hf_config(ModelConfig(shape=shape), build_tokenizer())
    config.eos_token_id = None  # generate exactly --new-tokens tokens
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = PAD
    return model.eval()


def make_prompts(count: int, length: int, vocab: int) -> list[list[int]]:
    rng = random.Random(0)
    return [
        [rng.randrange(1, vocab) for _ in range(rng.randint(max(1, length // 2), length))]
        for _ in range(count)
    ]


def left_padded(prompts: list[list[int]], device: str) -> tuple[torch.Tensor, torch.Tensor]:
    longest = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), longest), PAD, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, prompt in enumerate(prompts):
        ids[row, longest - len(prompt) :] = torch.tensor(prompt)
        mask[row, longest - len(prompt) :] = 1
    return ids.to(device), mask.to(device)


def run_generate(
    model, prompts, new_tokens: int, device: str, greedy: bool = False, static: bool = False
) -> list[list[int]]:
    """`static`: transformers' static KV cache, with which `generate` compiles the decode step."""
    ids, mask = left_padded(prompts, device)
    extra = {"cache_implementation": "static"} if static else {}
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=not greedy,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            pad_token_id=PAD,
            **extra,
        )
    return out[:, ids.shape[1] :].tolist()


def run_engine(
    engine: HFRolloutEngine, prompts, new_tokens: int, greedy: bool = False
) -> list[list[int]]:
    params = SamplingParams(temperature=0 if greedy else 1.0, max_tokens=new_tokens, seed=0)
    return engine.generate(prompts, params).token_lists()


def decode_bytes(model, prompt_lengths: list[int], new_tokens: int) -> float:
    """Bytes the decode steps must read at the least. The prefill yields the first new token;
    each of the `new_tokens - 1` decode steps after it reads every weight once (the LM head
    included; the embedding lookup reads one row a sequence, counted as nothing) and, for each
    sequence, the keys and values of every position it attends to: at step j, its prompt and
    j generated tokens (the current one included)."""
    config = model.config
    dtype_bytes = next(model.parameters()).element_size()
    weights = (
        sum(p.numel() for p in model.model.layers.parameters())
        + sum(p.numel() for p in model.model.norm.parameters())
        + model.lm_head.weight.numel()
    )
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_per_position = config.num_hidden_layers * 2 * config.num_key_value_heads * head_dim
    steps = new_tokens - 1
    positions = sum(length * steps + steps * (steps + 1) // 2 for length in prompt_lengths)
    return (steps * weights + positions * kv_per_position) * dtype_bytes


def timed(fn, device: str) -> tuple[float, list[list[int]]]:
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shape", default="qwen2-1.5b")
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    parser.add_argument(
        "--bandwidth", type=float, default=4.8e12, help="device memory bytes/s (H200: 4.8e12)"
    )
    parser.add_argument(
        "--engines",
        default="generate,generate_static,hf,hf_unfused,hf_eager",
        help="generate (baseline, first), generate_static (static cache + "
        "torch.compile), hf (CUDA graphs of torch.compile-fused ops), hf_unfused "
        "(CUDA graphs of plain ops), hf_eager (static cache, no graphs)",
    )
    parser.add_argument(
        "--check-tokens", type=int, default=32, help="greedy tokens compared against generate"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="after the table, profile an hf engine run of up to 64 new tokens and print its top "
        "GPU kernels and ops",
    )
    args = parser.parse_args()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    model = build(args.shape, dtype, args.device)
    prompts = make_prompts(args.prompts, args.prompt_len, model.config.vocab_size)
    generated = args.prompts * args.new_tokens
    graph_engine = HFRolloutEngine(model, [], PAD, cuda_graphs=True, max_num_seqs=args.prompts)
    unfused_engine = HFRolloutEngine(
        model, [], PAD, cuda_graphs=True, max_num_seqs=args.prompts, fused_ops=False
    )
    eager_engine = HFRolloutEngine(model, [], PAD, cuda_graphs=False, max_num_seqs=args.prompts)
    engines = {"hf": graph_engine, "hf_unfused": unfused_engine, "hf_eager": eager_engine}
    runners = {
        "generate": lambda: run_generate(model, prompts, args.new_tokens, args.device),
        "generate_static": lambda: run_generate(
            model, prompts, args.new_tokens, args.device, static=True
        ),
    }
    runners.update(
        {
            name: partial(run_engine, engine, prompts, args.new_tokens)
            for name, engine in engines.items()
        }
    )
    names = [n.strip() for n in args.engines.split(",") if n.strip()]
    rows = []
    for name in names:
        warm, out = timed(runners[name], args.device)
        assert all(len(r) == args.new_tokens for r in out), (
            f"{name}: not every sequence generated --new-tokens tokens"
        )
        best = min(timed(runners[name], args.device)[0] for _ in range(args.repeat))
        rows.append(
            {"engine": name, "first_s": warm, "best_s": best, "tokens_per_s": generated / best}
        )
        print(
            f"[bench] {name}: first run {warm:.2f} s, best of {args.repeat} {best:.2f} s",
            file=sys.stderr,
            flush=True,
        )
    check = prompts[:8]
    reference = run_generate(model, check, args.check_tokens, args.device, greedy=True)
    agree = {}
    for name, engine in engines.items():
        if name in names:
            ours = run_engine(engine, check, args.check_tokens, greedy=True)
            agree[name] = sum(_common_prefix(a, b) for a, b in zip(ours, reference)) / (
                len(check) * args.check_tokens
            )
    base = next((r["tokens_per_s"] for r in rows if r["engine"] == "generate"), None)
    floor_s = decode_bytes(model, [len(p) for p in prompts], args.new_tokens) / args.bandwidth
    for row in rows:
        row["bandwidth_fraction"] = floor_s / row["best_s"]
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(
        f"\n{args.shape}, {args.prompts} prompts x {args.new_tokens} new tokens "
        f"(prompts {args.prompt_len // 2}-{args.prompt_len} tokens), {args.dtype}, {device_name}\n"
    )
    print(f"decode bandwidth limit: {floor_s:.3f} s at {args.bandwidth / 1e12:.1f} TB/s\n")
    print(
        "| engine | first run s | best s | generated tok/s | x generate | of bandwidth limit "
        "| greedy agreement |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        ratio = f"{row['tokens_per_s'] / base:.2f}" if base else "-"
        shown = f"{agree[row['engine']]:.3f}" if row["engine"] in agree else "-"
        print(
            f"| {row['engine']} | {row['first_s']:.2f} | {row['best_s']:.2f} "
            f"| {row['tokens_per_s']:.0f} | {ratio} "
            f"| {100 * row['bandwidth_fraction']:.1f}% | {shown} |"
        )
    graphs = graph_engine.decoder.cuda_graphs
    print(f"\nhf engine decoded with CUDA graphs: {graphs}")
    print(
        json.dumps(
            {
                "shape": args.shape,
                "prompts": args.prompts,
                "new_tokens": args.new_tokens,
                "rows": rows,
                "greedy_agreement": agree,
                "cuda_graphs": graphs,
            }
        )
    )
    if args.profile:
        print_profile(
            lambda: run_engine(graph_engine, prompts, min(args.new_tokens, 64)), args.device
        )


def print_profile(run, device: str) -> None:
    """Where one run's time goes: the ops and kernels with the most device (or CPU) time."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        seconds, _ = timed(run, device)
    sort_by = "self_device_time_total" if device == "cuda" else "self_cpu_time_total"
    print(
        f"\nprofile of one hf engine run ({seconds:.2f} s under the profiler), top 25 by {sort_by}:"
    )
    print(prof.key_averages().table(sort_by=sort_by, row_limit=25))


def _common_prefix(a: list[int], b: list[int]) -> int:
    count = 0
    for x, y in zip(a, b):
        if x != y:
            break
        count += 1
    return count


if __name__ == "__main__":
    main()
