"""Rollout throughput: the hf engine (static KV cache + CUDA graphs) vs `model.generate`, plain and
with transformers' static cache + torch.compile (`cache_implementation="static"`).

Same random-init model of a public shape, same prompts (random token ids, lengths between
half and all of --prompt-len, left-padded), sampling at temperature 1, every sequence
generating exactly --new-tokens tokens (no EOS, but for the hf_eos row), all prompts in one
batch. Each engine runs once untimed (CUDA-graph capture, cuBLAS and allocator warm-up), then
--repeat timed runs;
the table shows the best, generated tokens/s, the ratio to `generate` (the baseline), and the
fraction of the decode bandwidth limit: the bytes every decode step must read (all weights
once, plus each sequence's KV cache so far), summed over the steps, over --bandwidth.
A short greedy check reports how many of the first tokens the two agree on (bf16 numerics
may part ways after a near tie; a wrong decoder parts at once). The hf row decodes with
split_kv's Triton attention where its self-check passes (the last lines name the kernel it
used); hf_flash and hf_matmul are the same engine with FlashAttention-2 and with the matmul
attention, to show what that changes. The hf_eos row's bandwidth limit counts the reads of
its own rows and lengths. --profile adds device ms per decode step by kind of kernel
(matmul, attention, token pick, fused element-wise, copies) for an hf run, the prefill's
taken out. On a GPU, lines before the table give the decode matmul floor: the
decode steps' weight-matmul FLOPs at this GPU's bf16 matmul peak, measured in the same run
(bench/matmul_peak.py's measurement); and the decode floor (`decode_floor`), which a
column gives each row's fraction of: each step's weight matmuls at the longer of their
FLOPs at that peak and their weights' reads at --bandwidth, plus the KV cache reads.

The hf_eos row measures what rows that end early cost: the same prompts and engine, with an
end-of-sequence token, where every other row ends at its --eos-at-th token and the rest run
to --new-tokens; a line after the table gives its time over the hf row's (all rows full).
A random-init model cannot be made to end on cue, so the bench forces it: its engine decodes
through `ForcedEnd`, a wrapper around the engine's decoder that sets the logit of the
end token to -1e4 on every row and step (no row ends by chance) except for the chosen rows
at the chosen step, where it is +1e4. The engine runs its ordinary EOS handling on that; it
does not know it is benchmarked. The bench checks that exactly those rows ended there.

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

from bench.matmul_peak import datasheet_peak, measure_matmul_tflops
from trainer.config import ModelConfig
from trainer.model import build_hf_config
from trainer.rollout.base import SamplingParams
from trainer.rollout.hf import HFRolloutEngine
from trainer.tiny import build_tokenizer

PAD = 0
EOS = 1  # the end token of the hf_eos row


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


class ForcedEnd:
    """The engine's decoder, with the end token's logit forced: never chosen, except by the
    rows in `rows` for their `at`-th token (see the module docstring)."""

    def __init__(self, decoder, rows: list[int], at: int):
        self.decoder, self.at = decoder, at
        self.rows = torch.tensor(rows, device=decoder.device)
        self.calls = 0

    def _forced(self, logits: torch.Tensor) -> torch.Tensor:
        logits[:, EOS] = -1e4
        if self.calls == self.at - 1:  # these logits pick token `at`; no row has ended before
            logits[self.rows, EOS] = 1e4
        return logits

    def prefill(self, prompts, n: int, max_new_tokens: int) -> torch.Tensor:
        self.calls = 0
        return self._forced(self.decoder.prefill(prompts, n, max_new_tokens))

    def decode(self, tokens: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self._forced(self.decoder.decode(tokens))

    def keep_rows(self, index: torch.Tensor) -> None:
        self.decoder.keep_rows(index)

    def release(self) -> None:
        self.decoder.release()


def decode_weights(model) -> int:
    """The weights every decode step reads: the layers', the final norm's and the LM head's
    (the embedding lookup reads one row a sequence, counted as nothing)."""
    return (
        sum(p.numel() for p in model.model.layers.parameters())
        + sum(p.numel() for p in model.model.norm.parameters())
        + model.lm_head.weight.numel()
    )


def kv_bytes(model, prompt_lengths: list[int], new_tokens: list[int]) -> float:
    """Bytes of keys and values the decode steps read at the least: at its decode step j, a
    sequence still generating reads those of its prompt and of its j generated tokens (the
    current one included)."""
    config = model.config
    dtype_bytes = next(model.parameters()).element_size()
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_per_position = config.num_hidden_layers * 2 * config.num_key_value_heads * head_dim
    positions = sum(
        length * (new - 1) + (new - 1) * new // 2 for length, new in zip(prompt_lengths, new_tokens)
    )
    return positions * kv_per_position * dtype_bytes


def decode_bytes(model, prompt_lengths: list[int], new_tokens: list[int]) -> float:
    """Bytes the decode steps must read at the least. The prefill yields each sequence's first
    new token; each of the `max(new_tokens) - 1` decode steps after it reads every weight once
    (the LM head included; the embedding lookup reads one row a sequence, counted as nothing)
    and the keys and values of `kv_bytes`."""
    dtype_bytes = next(model.parameters()).element_size()
    weights = (max(new_tokens) - 1) * decode_weights(model) * dtype_bytes
    return weights + kv_bytes(model, prompt_lengths, new_tokens)


def decode_matmul_flops(model, new_tokens: list[int]) -> float:
    """The weight-matmul FLOPs of the decode steps: every decode step multiplies each row by
    every weight of `decode_weights` (2 FLOPs per weight per row; the norms' few weights are
    counted too), all rows at every step as in an engine without row compaction. Attention's
    FLOPs are left out."""
    return 2.0 * decode_weights(model) * len(new_tokens) * (max(new_tokens) - 1)


def decode_floor(
    model, prompt_lengths: list[int], new_tokens: list[int], bandwidth: float, flops: float
) -> float:
    """Seconds the decode steps take at the least on a GPU of `bandwidth` bytes/s and a
    matmul peak of `flops` FLOP/s: each step's weight matmuls take the longer of their
    FLOPs at the peak (for the rows still generating then) and the weights' bytes at the
    bandwidth (one kernel computes while it reads), and the attention reads `kv_bytes` at
    the bandwidth. At 256 rows of qwen2-1.5b the FLOPs take longer than the bytes, so this
    floor lies above the bandwidth limit."""
    weights = decode_weights(model)
    read_s = weights * next(model.parameters()).element_size() / bandwidth
    matmul_s = sum(
        max(read_s, 2.0 * weights * sum(new > step for new in new_tokens) / flops)
        for step in range(1, max(new_tokens))
    )
    return matmul_s + kv_bytes(model, prompt_lengths, new_tokens) / bandwidth


def timed(fn, device: str) -> tuple[float, list[list[int]]]:
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start, out


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    """The model and prompts this bench generates from (--shape, --prompts, --prompt-len,
    --new-tokens, --device, --dtype), shared with the benches that time parts of it."""
    parser.add_argument("--shape", default="qwen2-1.5b")
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=512)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_workload_arguments(parser)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument(
        "--bandwidth", type=float, default=4.8e12, help="device memory bytes/s (H200: 4.8e12)"
    )
    parser.add_argument(
        "--engines",
        default="generate,generate_static,hf,hf_eos,hf_matmul,hf_unfused,hf_eager",
        help="generate (baseline, first), generate_static (static cache + "
        "torch.compile), hf (CUDA graphs of torch.compile-fused ops, FlashAttention decode "
        "where it works), hf_eos (hf, every other row ending at its --eos-at-th token), "
        "hf_matmul (hf with matmul attention), hf_flash (hf with FlashAttention-2 "
        "decode), hf_unfused (CUDA graphs of plain ops), hf_eager "
        "(static cache, no graphs)",
    )
    parser.add_argument(
        "--eos-at", type=int, default=64, help="where half the rows end in the hf_eos row"
    )
    parser.add_argument(
        "--check-tokens", type=int, default=32, help="greedy tokens compared against generate"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="after the table, profile hf engine runs of 1 and of up to 129 new tokens and print "
        "device ms per decode step by kind of kernel, and the top GPU kernels and ops",
    )
    args = parser.parse_args()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    model = build(args.shape, dtype, args.device)
    prompts = make_prompts(args.prompts, args.prompt_len, model.config.vocab_size)
    graph_engine = HFRolloutEngine(model, [], PAD, cuda_graphs=True, max_num_seqs=args.prompts)
    unfused_engine = HFRolloutEngine(
        model, [], PAD, cuda_graphs=True, max_num_seqs=args.prompts, fused_ops=False
    )
    eager_engine = HFRolloutEngine(model, [], PAD, cuda_graphs=False, max_num_seqs=args.prompts)
    matmul_engine = HFRolloutEngine(
        model, [], PAD, cuda_graphs=True, max_num_seqs=args.prompts, attention="matmul"
    )
    flash_engine = HFRolloutEngine(
        model, [], PAD, cuda_graphs=True, max_num_seqs=args.prompts, attention="flash"
    )
    eos_engine = HFRolloutEngine(model, [EOS], PAD, cuda_graphs=True, max_num_seqs=args.prompts)
    eos_at = min(args.eos_at, args.new_tokens)
    ending = list(range(0, args.prompts, 2))
    eos_engine.decoder = ForcedEnd(eos_engine.decoder, ending, eos_at)
    expected_lengths = {
        "hf_eos": [eos_at if row % 2 == 0 else args.new_tokens for row in range(args.prompts)]
    }
    engines = {
        "hf": graph_engine,
        "hf_eos": eos_engine,
        "hf_matmul": matmul_engine,
        "hf_flash": flash_engine,
        "hf_unfused": unfused_engine,
        "hf_eager": eager_engine,
    }
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
        lengths = expected_lengths.get(name, [args.new_tokens] * args.prompts)
        assert [len(r) for r in out] == lengths, f"{name}: responses not of the planned lengths"
        best = min(timed(runners[name], args.device)[0] for _ in range(args.repeat))
        rows.append(
            {
                "engine": name,
                "first_s": warm,
                "best_s": best,
                "tokens_per_s": sum(lengths) / best,
                "new_tokens": lengths,
            }
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
        if name in names and name != "hf_eos":
            ours = run_engine(engine, check, args.check_tokens, greedy=True)
            agree[name] = sum(_common_prefix(a, b) for a, b in zip(ours, reference)) / (
                len(check) * args.check_tokens
            )
    base = next((r["tokens_per_s"] for r in rows if r["engine"] == "generate"), None)
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    # this GPU's matmul peak, measured here, for the matmul floor and the decode floor
    peak = measure_matmul_tflops(repeat=10)["median_tflops"] if args.device == "cuda" else None
    prompt_lengths = [len(p) for p in prompts]
    full = [args.new_tokens] * args.prompts
    floor_s = decode_bytes(model, prompt_lengths, full) / args.bandwidth
    floors, decode_floors = {}, {}
    for row in rows:
        lengths = row.pop("new_tokens")
        row_floor_s = decode_bytes(model, prompt_lengths, lengths) / args.bandwidth
        row["bandwidth_fraction"] = row_floor_s / row["best_s"]
        floors[row["engine"]] = row_floor_s
        if peak is not None:
            decode_floors[row["engine"]] = decode_floor(
                model, prompt_lengths, lengths, args.bandwidth, peak * 1e12
            )
            row["decode_floor_fraction"] = decode_floors[row["engine"]] / row["best_s"]
    best = {row["engine"]: row["best_s"] for row in rows}
    eos_ratio = best["hf_eos"] / best["hf"] if "hf_eos" in best and "hf" in best else None
    # What the same two workloads take at the bandwidth limit: every step still reads every
    # weight, so halving the rows does not halve a bandwidth-bound step.
    eos_floor_ratio = floors["hf_eos"] / floors["hf"] if eos_ratio is not None else None
    print(
        f"\n{args.shape}, {args.prompts} prompts x {args.new_tokens} new tokens "
        f"(prompts {args.prompt_len // 2}-{args.prompt_len} tokens), {args.dtype}, {device_name}\n"
    )
    print(f"decode bandwidth limit: {floor_s:.3f} s at {args.bandwidth / 1e12:.1f} TB/s")
    matmul_floor = decode_floor_s = None
    if peak is not None:
        flops = decode_matmul_flops(model, full)
        matmul_floor = {"seconds": flops / (peak * 1e12), "peak_tflops": peak}
        decode_floor_s = decode_floor(model, prompt_lengths, full, args.bandwidth, peak * 1e12)
        print(
            f"decode matmul floor: {matmul_floor['seconds']:.3f} s, its {flops / 1e12:.0f} "
            f"TFLOP at this GPU's measured bf16 matmul peak ({peak:.0f} TFLOP/s; datasheet "
            f"{datasheet_peak(device_name)})\n"
            f"decode floor: {decode_floor_s:.3f} s, each step's weight matmuls at the longer "
            "of their FLOPs at that peak and their weights' bytes at the bandwidth, plus the "
            "KV cache reads at the bandwidth"
        )
    print()
    print(
        "| engine | first run s | best s | generated tok/s | x generate | of bandwidth limit "
        "| of decode floor | greedy agreement |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        ratio = f"{row['tokens_per_s'] / base:.2f}" if base else "-"
        shown = f"{agree[row['engine']]:.3f}" if row["engine"] in agree else "-"
        of_floor = row.get("decode_floor_fraction")
        of_floor = f"{100 * of_floor:.1f}%" if of_floor is not None else "-"
        print(
            f"| {row['engine']} | {row['first_s']:.2f} | {row['best_s']:.2f} "
            f"| {row['tokens_per_s']:.0f} | {ratio} "
            f"| {100 * row['bandwidth_fraction']:.1f}% | {of_floor} | {shown} |"
        )
    eos_decode_floor_ratio = None
    if eos_ratio is not None:
        at_floor = ""
        if peak is not None:  # what the same two workloads take at the decode floor
            eos_decode_floor_ratio = decode_floors["hf_eos"] / decode_floors["hf"]
            at_floor = f", at the decode floor {eos_decode_floor_ratio:.2f}x"
        print(
            f"\nhf_eos (half the rows end at token {eos_at}) over hf (all rows to "
            f"{args.new_tokens}): {eos_ratio:.2f}x the time (target <= 0.6x); "
            f"at the bandwidth limit the same two workloads take {eos_floor_ratio:.2f}x"
            f"{at_floor}"
        )
    graphs = graph_engine.decoder.cuda_graphs
    kernel = getattr(graph_engine.decoder, "kernel", "model forward")
    print(f"\nhf engine decoded with CUDA graphs: {graphs}, decode attention: {kernel}")
    print(
        json.dumps(
            {
                "shape": args.shape,
                "prompts": args.prompts,
                "new_tokens": args.new_tokens,
                "rows": rows,
                "greedy_agreement": agree,
                "eos_time_ratio": eos_ratio,
                "eos_bandwidth_limit_ratio": eos_floor_ratio,
                "eos_decode_floor_ratio": eos_decode_floor_ratio,
                "cuda_graphs": graphs,
                "decode_attention": kernel,
                "bandwidth_limit_s": floor_s,
                "matmul_floor": matmul_floor,
                "decode_floor_s": decode_floor_s,
            }
        )
    )
    if args.profile:
        steps = min(args.new_tokens, 129)
        print_profile(partial(run_engine, graph_engine, prompts), args.device, steps)


KERNEL_KINDS = (  # (kind, substrings of kernel names), first match wins
    ("attention", ("flash", "split_kv")),
    ("matmul", ("gemm", "nvjet", "cutlass", "xmma", "splitk")),
    ("token pick and its noise", ("_pick", "argmax", "logsumexp", "distribution", "exponential")),
    ("fused element-wise (triton)", ("triton", "_silu_mul", "_rotary_store")),
    (
        "copy, index, fill",
        ("copy", "index", "cat", "gather", "scatter", "memcpy", "memset", "fill"),
    ),
)


def kernel_split(events, steps: int) -> dict[str, float]:
    """Device milliseconds per step by kind of kernel, from a profile's averaged events."""
    split: dict[str, float] = {}
    for event in events:
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        name = event.key.lower()
        kind = next((k for k, words in KERNEL_KINDS if any(w in name for w in words)), "other")
        split[kind] = split.get(kind, 0.0) + event.self_device_time_total / 1e3 / steps
    return split


def print_profile(run, device: str, steps: int) -> None:
    """Where a decode step's time goes: an hf run of `steps` new tokens and one of a single
    token (the prefill and the first pick) under the profiler; their difference over the
    `steps - 1` decode steps gives device ms per step by kind of kernel, the second alone the
    prefill's; then the kernels (or CPU ops) with the most time in the longer run."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    profiles = {}
    for tokens in (1, steps):
        with profile(activities=activities) as prof:
            seconds, _ = timed(lambda tokens=tokens: run(tokens), device)
        profiles[tokens] = (prof, seconds)
    sort_by = "self_device_time_total" if device == "cuda" else "self_cpu_time_total"
    (first, first_s), (longer, longer_s) = profiles[1], profiles[steps]
    print(
        f"\nprofiled hf runs: 1 new token {first_s:.3f} s, {steps} new tokens {longer_s:.3f} s "
        "(under the profiler)"
    )
    if device == "cuda":
        prefill = kernel_split(first.key_averages(), 1)
        total = kernel_split(longer.key_averages(), 1)
        print(
            f"device ms per decode step (the {steps}-token run minus the 1-token run, over "
            f"{steps - 1} steps), and the 1-token run's:"
        )
        for kind in sorted(total, key=lambda k: -total[k]):
            per_step = (total[kind] - prefill.get(kind, 0.0)) / (steps - 1)
            print(f"  {kind:<30} {per_step:7.3f}   {prefill.get(kind, 0.0):8.1f}")
        per_step = (sum(total.values()) - sum(prefill.values())) / (steps - 1)
        print(f"  {'total':<30} {per_step:7.3f}   {sum(prefill.values()):8.1f}\n")
    print(longer.key_averages().table(sort_by=sort_by, row_limit=25))


def _common_prefix(a: list[int], b: list[int]) -> int:
    count = 0
    for x, y in zip(a, b):
        if x != y:
            break
        count += 1
    return count


if __name__ == "__main__":
    main()
