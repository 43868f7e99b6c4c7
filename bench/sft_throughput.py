"""SFT step throughput: Megatron-FSDP vs FSDP2 + plain Hugging Face loss, same model, data, settings.

Every variant runs in this one process group, one after another (optionally alternating
`--repeat` times), on a random-init model of a public shape, with synthetic tokens. It
prints, per variant: useful tokens/s/GPU, TFLOP/s/GPU (6*N*tokens for the matmuls incl.
the LM head + 6*L*d_attn*sum(doc_len^2) for causal attention), MFU against the measured
bf16 peak (790 TFLOP/s per H200 by default), peak memory, and the ratio to the first
variant (the baseline).

A variant is `strategy:lever+lever...`, strategy `fsdp2` or `megatron_fsdp`; levers:
  plain | chunked   loss over the vocabulary: full fp32 logits (HF's way) or chunked, fused grads
  full | packed | padded   data: every row exactly --seq tokens (default); variable-length
                    documents packed into rows of micro_batch*seq tokens; or the same
                    documents padded to --seq
  compile           torch.compile each decoder layer
  ac                activation checkpointing of every decoder layer
  embed_unit        Megatron-FSDP: the embedding is an FSDP unit too
  double_buffer     Megatron-FSDP: fsdp_double_buffer
  no_overlap        Megatron-FSDP: overlap_grad_reduce / overlap_param_gather off
  bucket=N          Megatron-FSDP: gradient bucket size in elements

2xH200 example (the issue's target shape):
  torchrun --nproc-per-node 2 bench/sft_throughput.py --shape qwen2-1.5b --seq 4096 --micro-batch 2 \
      --variants fsdp2:plain,megatron_fsdp:plain,megatron_fsdp:chunked,megatron_fsdp:chunked+compile
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

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer.config import ModelConfig, OptimConfig, StrategyConfig  # noqa: E402
from trainer.data.batching import collate_packed, collate_padded  # noqa: E402
from trainer.data.chat import Example  # noqa: E402
from trainer.distributed import init_distributed, shutdown  # noqa: E402
from trainer.model import build_hf_config, build_model, count_parameters  # noqa: E402
from trainer.optim import clip_grad_norm  # noqa: E402
from trainer.strategies import make_strategy  # noqa: E402

LEVERS = {"plain", "chunked", "full", "packed", "padded", "compile", "ac", "embed_unit", "double_buffer", "no_overlap"}


@dataclass
class Variant:
    spec: str
    strategy: str
    loss: str = "plain"
    data: str = "full"
    compile: bool = False
    ac: bool = False
    embed_unit: bool = False
    double_buffer: bool = False
    overlap: bool = True
    bucket: int | None = None
    results: list[dict] = field(default_factory=list)


def parse_variant(spec: str) -> Variant:
    strategy, _, levers = spec.partition(":")
    if strategy not in ("fsdp2", "megatron_fsdp"):
        raise SystemExit(f"variant {spec!r}: strategy must be fsdp2 or megatron_fsdp")
    variant = Variant(spec, strategy)
    for lever in filter(None, levers.split("+")):
        if lever.startswith("bucket="):
            variant.bucket = int(lever.split("=", 1)[1])
        elif lever not in LEVERS:
            raise SystemExit(f"variant {spec!r}: unknown lever {lever!r}; choose from {sorted(LEVERS)} or bucket=N")
        elif lever in ("plain", "chunked"):
            variant.loss = lever
        elif lever in ("full", "packed", "padded"):
            variant.data = lever
        elif lever == "no_overlap":
            variant.overlap = False
        else:
            setattr(variant, lever, True)
    return variant


def synthetic_micro_batches(variant: Variant, args, vocab: int, count: int) -> list:
    """`count` micro-batches of random tokens; every position is a target (pretraining-like SFT)."""
    rng = random.Random(17)  # same documents on every rank, so every rank runs as many micro-batches
    batches = []
    for _ in range(count):
        if variant.data == "full":
            docs = [Example([rng.randrange(vocab) for _ in range(args.seq)], [1] * args.seq)
                    for _ in range(args.micro_batch)]
            batches.append(collate_padded(docs, 0))
            continue
        budget = args.micro_batch * args.seq
        docs, used = [], 0
        while True:
            length = rng.randint(args.min_doc, args.seq)
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
    model_cfg = ModelConfig(shape=args.shape, loss=variant.loss, loss_chunk_tokens=args.chunk_tokens,
                            compile=variant.compile, activation_checkpointing=variant.ac,
                            attn_implementation=args.attn, overrides=dict(args.override))
    strategy_cfg = StrategyConfig(
        name=variant.strategy, mixed_precision="bf16",
        unit_modules="decoder+embedding" if variant.embed_unit else "decoder",
        fsdp_double_buffer=variant.double_buffer, overlap_grad_reduce=variant.overlap,
        overlap_param_gather=variant.overlap, bucket_size=variant.bucket,
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
    timings = []
    for step in range(args.warmup + args.steps):
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
        if step >= args.warmup:
            timings.append(time.perf_counter() - started)
    seconds = sorted(timings)[len(timings) // 2]  # median step
    flops = 6.0 * counts["matmul"] * tokens + 6.0 * hf_config.num_hidden_layers * counts["attention_dim"] * attention
    result = {
        "variant": variant.spec,
        "tokens_per_s_per_gpu": tokens / seconds,
        "tflops_per_gpu": flops / seconds / 1e12,
        "mfu": flops / seconds / 1e12 / args.peak_tflops,
        "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0,
        "step_s": seconds,
        "loss": float(loss.item()) / max(batches[-1].targets, 1),
    }
    del model, optimizer, strategy, batches
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return result


def _sync(cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()


def _key_value(text: str) -> tuple[str, object]:
    import yaml

    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r}: expected key=value")
    return key, yaml.safe_load(value)


class _NoTokenizer:
    """Synthetic tokens need no tokenizer; shape presets carry their own vocabulary size."""

    eos_token_id = pad_token_id = None

    def __len__(self) -> int:
        return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="qwen2-1.5b")
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--micro-batch", type=int, default=2)
    parser.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
    parser.add_argument("--min-doc", type=int, default=256, help="shortest document for packed/padded data")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=1, help="alternate the variant list this many times")
    parser.add_argument("--chunk-tokens", type=int, default=4096)
    parser.add_argument("--attn", default="sdpa")
    parser.add_argument("--peak-tflops", type=float, default=790.0, help="bf16 peak per GPU (H200: about 790)")
    parser.add_argument("--override", type=_key_value, action="append", default=[],
                        help="HF config field for the shape, e.g. num_hidden_layers=2 (repeatable)")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: smoke test with fsdp2 only")
    parser.add_argument("--variants", default="fsdp2:plain,megatron_fsdp:plain,megatron_fsdp:chunked")
    parser.add_argument("--json", dest="json_out", default=None, help="also write the results here")
    args = parser.parse_args()
    variants = [parse_variant(s) for s in args.variants.split(",")]
    env = init_distributed(args.device)
    try:
        for _ in range(args.repeat):
            for variant in variants:
                variant.results.append(run_variant(variant, args, env))
                if env.is_main:
                    r = variant.results[-1]
                    print(f"[bench] {r['variant']}: {r['tflops_per_gpu']:.0f} TFLOP/s/GPU, {r['peak_mem_gib']:.1f} GiB",
                          file=sys.stderr)
    finally:
        shutdown(env)
    if not env.is_main:
        return
    rows = [_best(v) for v in variants]
    base = rows[0]["tflops_per_gpu"]
    print(f"\n{args.shape}, seq {args.seq}, micro-batch {args.micro_batch}, grad-accum {args.grad_accum}, "
          f"{env.world_size} GPUs, median of {args.steps} steps, best of {args.repeat} round(s)")
    print(f"{'variant':<44} {'tok/s/GPU':>10} {'TFLOP/s/GPU':>12} {'MFU':>6} {'peak GiB':>9} {'vs base':>8}")
    for row in rows:
        print(f"{row['variant']:<44} {row['tokens_per_s_per_gpu']:>10.0f} {row['tflops_per_gpu']:>12.1f} "
              f"{100 * row['mfu']:>5.1f}% {row['peak_mem_gib']:>9.1f} {row['tflops_per_gpu'] / base:>7.3f}x")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"args": vars(args), "runs": [v.results for v in variants]}, indent=1))


def _best(variant: Variant) -> dict:
    return max(variant.results, key=lambda r: r["tflops_per_gpu"])


if __name__ == "__main__":
    main()
