"""SFT step throughput at equal levers: every lever set runs on every strategy (its twin row).

Every variant runs in this one process group, one after another (optionally alternating
`--repeat` times), on a random-init model of a public shape, with synthetic tokens. It
prints, per variant: useful tokens/s/GPU, TFLOP/s/GPU (6*N*tokens for the matmuls incl.
the LM head + 6*L*d_attn*sum(doc_len^2) for causal attention), MFU against the datasheet
dense bf16 peak (989 TFLOP/s for an H200) and against the matmul peak measured at the start
of the run (bench/matmul_peak.py), peak memory above what the process already held when the
variant started, the ratio to the first row, and the ratio of
each Megatron-FSDP row to its FSDP2 twin with the same levers.

A lever set is `lever+lever...`; levers:
  plain | chunked | flce   loss over the vocabulary: full fp32 logits (HF's way), our chunked
                    loss with fused grads, or liger-kernel's fused linear cross-entropy
  liger             liger-kernel RoPE, RMSNorm, SwiGLU (with flce: what verl's use_liger turns on)
  full | packed | padded   data: every row exactly --seq tokens (default); variable-length
                    documents packed into rows of micro_batch*seq tokens; or the same
                    documents padded to --seq
  varlen            attention through model.attn_implementation=varlen (trainer/attention.py):
                    packed rows use torch's variable-length flash kernel (default: --attn)
  compile           torch.compile each decoder layer
  ac                activation checkpointing of every decoder layer
Megatron-FSDP only (allowed when megatron_fsdp is the only strategy, having no twin):
  embed_unit | double_buffer | no_overlap | bucket=N

liger-kernel replaces RoPE and the norm and MLP classes in transformers' model module for the
whole process, so every lever set with `liger` runs after all those without it (all rounds).

1xH200 example:
  python bench/sft_throughput.py --shape qwen2-1.5b --seq 4096 --micro-batch 2 \
      --strategies fsdp2,megatron_fsdp --levers plain,chunked+compile,liger+flce
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.matmul_peak import datasheet_peak, measure_matmul_tflops
from trainer.config import ModelConfig, OptimConfig, StrategyConfig
from trainer.data.batching import collate_packed, collate_padded
from trainer.data.chat import Example
from trainer.distributed import init_distributed, shutdown
from trainer.model import build_hf_config, build_model, count_parameters
from trainer.optim import clip_grad_norm
from trainer.strategies import make_strategy

STRATEGIES = ("fsdp2", "megatron_fsdp")
LOSSES = {"plain": "plain", "chunked": "chunked", "flce": "liger"}
COMMON_LEVERS = {*LOSSES, "liger", "full", "packed", "padded", "varlen", "compile", "ac"}
MEGATRON_LEVERS = {"embed_unit", "double_buffer", "no_overlap"}


@dataclass
class Variant:
    strategy: str
    levers: str
    loss: str = "plain"
    data: str = "full"
    liger: bool = False
    varlen: bool = False
    compile: bool = False
    ac: bool = False
    embed_unit: bool = False
    double_buffer: bool = False
    overlap: bool = True
    bucket: int | None = None
    results: list[dict] = field(default_factory=list)

    @property
    def spec(self) -> str:
        return f"{self.strategy}:{self.levers}"


def parse_variant(strategy: str, levers: str, twins: bool) -> Variant:
    """One strategy with one lever set; `twins`: the set also runs on another strategy."""
    variant = Variant(strategy, levers)
    for lever in filter(None, levers.split("+")):
        if lever.startswith("bucket=") or lever in MEGATRON_LEVERS:
            if strategy != "megatron_fsdp" or twins:
                raise SystemExit(
                    f"lever {lever!r} exists for megatron_fsdp alone: it has no FSDP2 twin; "
                    "run it with --strategies megatron_fsdp"
                )
            if lever.startswith("bucket="):
                variant.bucket = int(lever.split("=", 1)[1])
            elif lever == "no_overlap":
                variant.overlap = False
            else:
                setattr(variant, lever, True)
        elif lever not in COMMON_LEVERS:
            raise SystemExit(
                f"lever set {levers!r}: unknown lever {lever!r}; choose from "
                f"{sorted(COMMON_LEVERS | MEGATRON_LEVERS)} or bucket=N"
            )
        elif lever in LOSSES:
            variant.loss = LOSSES[lever]
        elif lever in ("full", "packed", "padded"):
            variant.data = lever
        else:
            setattr(variant, lever, True)
    return variant


def schedule(variants: list[Variant], repeat: int) -> list[Variant]:
    """The run order: `repeat` alternating rounds of the variants without liger, then of those
    with it (liger's patches would otherwise reach the later variants' models)."""
    plain = [v for v in variants if not v.liger]
    liger = [v for v in variants if v.liger]
    return plain * repeat + liger * repeat


def synthetic_micro_batches(variant: Variant, args, vocab: int, count: int) -> list:
    """`count` micro-batches of random tokens; every position is a target (pretraining-like SFT)."""
    rng = random.Random(
        17
    )  # same documents on every rank, so every rank runs as many micro-batches
    batches = []
    for _ in range(count):
        if variant.data == "full":
            docs = [
                Example([rng.randrange(vocab) for _ in range(args.seq)], [1] * args.seq)
                for _ in range(args.micro_batch)
            ]
            batches.append(collate_padded(docs, 0))
            continue
        budget = args.micro_batch * args.seq
        docs, used = [], 0
        while True:
            length = rng.randint(args.min_doc, args.max_doc or args.seq)
            if used + length > budget:
                break
            docs.append(Example([rng.randrange(vocab) for _ in range(length)], [1] * length))
            used += length
        if variant.data == "packed":
            batches.append(collate_packed(docs, 0))
        else:  # padded: the same documents, micro_batch rows at a time padded to --seq
            for start in range(0, len(docs), args.micro_batch):
                batches.append(collate_padded(docs[start : start + args.micro_batch], 0))
    return batches


def run_variant(variant: Variant, args, env) -> dict:
    # What earlier variants of this process still hold (compiled graphs keep their modules
    # alive) is not this variant's memory: the peak is reported above it.
    held = torch.cuda.memory_allocated() if env.device.type == "cuda" else 0
    model_cfg = ModelConfig(
        shape=args.shape,
        loss=variant.loss,
        loss_chunk_tokens=args.chunk_tokens,
        liger=variant.liger,
        compile=variant.compile,
        activation_checkpointing=variant.ac,
        attn_implementation="varlen" if variant.varlen else args.attn,
        overrides=dict(args.override),
    )
    strategy_cfg = StrategyConfig(
        name=variant.strategy,
        mixed_precision="bf16",
        unit_modules="decoder+embedding" if variant.embed_unit else "decoder",
        fsdp_double_buffer=variant.double_buffer,
        overlap_grad_reduce=variant.overlap,
        overlap_param_gather=variant.overlap,
        bucket_size=variant.bucket,
    )
    hf_config = build_hf_config(model_cfg, _NoTokenizer())
    strategy = make_strategy(strategy_cfg, env)
    model = strategy.wrap(build_model(model_cfg, hf_config, env.device, seed=0))
    optimizer = strategy.build_optimizer(model, OptimConfig(lr=1e-5, weight_decay=0.1))
    counts = count_parameters(hf_config)
    batches = synthetic_micro_batches(variant, args, hf_config.vocab_size, args.grad_accum)
    cuda = env.device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    timing = timed_steps(model, strategy, optimizer, batches, args.warmup, args.steps, env)
    seconds, tokens = timing.seconds, timing.tokens
    flops = (
        6.0 * counts["matmul"] * tokens
        + 6.0 * hf_config.num_hidden_layers * counts["attention_dim"] * timing.attention
    )
    result = {
        "variant": variant.spec,
        "tokens_per_s_per_gpu": tokens / seconds,
        "tflops_per_gpu": flops / seconds / 1e12,
        "peak_mem_gib": (torch.cuda.max_memory_allocated() - held) / 2**30 if cuda else 0.0,
        "held_at_start_gib": held / 2**30,
        "step_s": seconds,
        "loss": timing.loss,
    }
    del model, optimizer, strategy, batches
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return result


@dataclass
class StepTiming:
    seconds: float  # the median timed step
    tokens: int  # per step
    attention: int  # per step: the sum of squared document lengths (causal attention's work)
    loss: float  # the last micro-batch's mean token loss


def timed_steps(
    model: torch.nn.Module,
    strategy: Any,
    optimizer: torch.optim.Optimizer,
    batches: list,
    warmup: int,
    steps: int,
    env: Any,
) -> StepTiming:
    """`warmup + steps` optimizer steps the way SFT takes them (every micro-batch's backward,
    the strategy's gradient reduction, clipping at 1.0, the optimizer); the median of the last
    `steps` is the step time."""
    cuda = env.device.type == "cuda"
    timings = []
    for step in range(warmup + steps):
        _sync(cuda)
        started = time.perf_counter()
        tokens = attention = 0
        for batch in batches:
            batch_on_device = batch.to(env.device)
            loss = model(**batch_on_device.inputs)
            (loss / max(batch.targets, 1)).backward()
            tokens += batch.tokens
            attention += sum(n * n for n in batch.doc_lengths)
        strategy.before_optimizer_step(model)
        clip_grad_norm(strategy.trainable_params(model, optimizer), 1.0, env.device)
        optimizer.step()
        strategy.zero_grad(optimizer)
        _sync(cuda)
        if step >= warmup:
            timings.append(time.perf_counter() - started)
    seconds = sorted(timings)[len(timings) // 2]
    return StepTiming(seconds, tokens, attention, float(loss.item()) / max(batches[-1].targets, 1))


def _sync(cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()


def _key_value(text: str) -> tuple[str, object]:
    """One `--override key=value`, its value read as a config override is (bounded YAML)."""
    from trainer.config import ConfigError, parse_override_value

    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r}: expected key=value")
    try:
        return key, parse_override_value(key, value, clear=None)
    except ConfigError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


class _NoTokenizer:
    """Synthetic tokens need no tokenizer; shape presets carry their own vocabulary size."""

    eos_token_id = pad_token_id = None

    def __len__(self) -> int:
        return 0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shape", default="qwen2-1.5b")
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--micro-batch", type=int, default=2)
    parser.add_argument(
        "--grad-accum", type=int, default=1, help="micro-batches per optimizer step"
    )
    parser.add_argument(
        "--min-doc", type=int, default=256, help="shortest document for packed/padded data"
    )
    parser.add_argument(
        "--max-doc", type=int, default=None, help="longest document (default: --seq)"
    )
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument(
        "--repeat", type=int, default=1, help="alternate the variant list this many times"
    )
    parser.add_argument("--chunk-tokens", type=int, default=4096)
    parser.add_argument("--attn", default="sdpa")
    parser.add_argument(
        "--matmul-peak",
        type=float,
        default=None,
        help="measured bf16 matmul TFLOP/s per GPU; default: measure it now (bench/matmul_peak.py)",
    )
    parser.add_argument(
        "--override",
        type=_key_value,
        action="append",
        default=[],
        help="HF config field for the shape, e.g. num_hidden_layers=2 (repeatable)",
    )
    parser.add_argument(
        "--device", default="cuda", choices=["cuda", "cpu"], help="cpu: smoke test with fsdp2 only"
    )
    parser.add_argument(
        "--strategies", default="fsdp2,megatron_fsdp", help="each lever set runs on each of these"
    )
    parser.add_argument(
        "--levers",
        default="plain,chunked,chunked+compile",
        help="comma-separated lever sets (see above)",
    )
    parser.add_argument("--json", dest="json_out", default=None, help="also write the results here")
    args = parser.parse_args()
    strategies = [s for s in args.strategies.split(",") if s]
    if not strategies or set(strategies) - set(STRATEGIES):
        raise SystemExit(f"--strategies: choose from {', '.join(STRATEGIES)}")
    variants = [
        parse_variant(strategy, levers, twins=len(strategies) > 1)
        for levers in args.levers.split(",")
        for strategy in strategies
    ]
    env = init_distributed(args.device)
    cuda = env.device.type == "cuda"
    matmul_peak = args.matmul_peak or (
        measure_matmul_tflops()["median_tflops"] if cuda else float("nan")
    )
    datasheet = (datasheet_peak(torch.cuda.get_device_name()) if cuda else None) or float("nan")
    try:
        for variant in schedule(variants, args.repeat):
            variant.results.append(run_variant(variant, args, env))
            if env.is_main:
                r = variant.results[-1]
                print(
                    f"[bench] {variant.spec}: {r['tokens_per_s_per_gpu']:.0f} tok/s/GPU, "
                    f"{r['tflops_per_gpu']:.1f} TFLOP/s/GPU, {r['peak_mem_gib']:.1f} GiB",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        shutdown(env)
    if not env.is_main:
        return
    print_table(variants, args, env.world_size, matmul_peak, datasheet)
    if args.json_out:
        runs = [
            {"strategy": v.strategy, "levers": v.levers, "results": v.results} for v in variants
        ]
        Path(args.json_out).write_text(
            json.dumps(
                {"args": vars(args), "matmul_peak": matmul_peak, "runs": runs},
                indent=1,
                default=str,
            )
        )


def print_table(
    variants: list[Variant], args, world_size: int, matmul_peak: float, datasheet: float
) -> None:
    rows = {v.spec: _best(v) for v in variants}
    base = rows[variants[0].spec]["tflops_per_gpu"]
    print(
        f"\n{args.shape}, seq {args.seq}, micro-batch {args.micro_batch}, "
        f"grad-accum {args.grad_accum}, "
        f"{world_size} GPU(s), median of {args.steps} steps, best of {args.repeat} round(s); "
        f"measured bf16 matmul peak {matmul_peak:.0f} TFLOP/s, datasheet {datasheet:.0f}\n"
    )
    print(
        f"| strategy | levers | tok/s/GPU | TFLOP/s/GPU | MFU ({datasheet:.0f}) | of measured peak "
        f"({matmul_peak:.0f}) | peak GiB | vs first row | Megatron-FSDP vs FSDP2 twin |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for variant in variants:
        row = rows[variant.spec]
        twin = rows.get(f"fsdp2:{variant.levers}") if variant.strategy == "megatron_fsdp" else None
        twin_ratio = f"{row['tflops_per_gpu'] / twin['tflops_per_gpu']:.3f}x" if twin else "-"
        print(
            f"| {variant.strategy} | {variant.levers} | {row['tokens_per_s_per_gpu']:,.0f} | "
            f"{row['tflops_per_gpu']:.1f} | {100 * row['tflops_per_gpu'] / datasheet:.1f}% | "
            f"{100 * row['tflops_per_gpu'] / matmul_peak:.1f}% | {row['peak_mem_gib']:.1f} | "
            f"{row['tflops_per_gpu'] / base:.3f}x | {twin_ratio} |"
        )


def _best(variant: Variant) -> dict:
    return max(variant.results, key=lambda r: r["tflops_per_gpu"])


if __name__ == "__main__":
    main()
