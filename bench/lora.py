"""LoRA vs full fine-tuning on one GPU: peak memory, tokens/s and TFLOP/s in one table.

For each shape (default: Qwen2.5-7B, then Qwen2-1.5B, random init, bf16 compute) and strategy,
two rows: LoRA (rank 64, alpha 128, every linear layer of the decoder) and full fine-tuning
(every weight, AdamW). Each row runs in a process of its own, so that a row that runs out of
memory (full fine-tuning of the 7B shape) is reported as OOM, with the phase it reached,
instead of ending the run or leaving fragments for the next row. A row is our SFT step:
`build_model` (with the LoRA injection SFT uses), the strategy's wrap and optimizer, the
chunked loss, gradient reduction, clipping, AdamW; synthetic tokens, every one a target.

Memory: `torch.cuda.max_memory_allocated` / `max_memory_reserved` over the timed steps (the
counters are reset after the model and optimizer are built). "transient" is that peak minus
what stays allocated after the steps: activations, gathered weights and gradients in flight.

FLOPs per step, T tokens, N matmul weights (decoder + LM head), L layers, d attention width:
  full: 6*N*T + 6*L*d*sum(doc_len^2)
  LoRA: 4*N*T + 6*A*T + 6*L*d*sum(doc_len^2), A = adapter parameters: the frozen weights
        run forward (2*N*T) and pass the gradient to their input (2*N*T) but compute no
        weight gradient, so the base costs 2/3 of full training; the adapters train fully;
        attention has no weights and costs the same in both.
Full fine-tuning memory need (printed under the table): per parameter, FSDP2 holds fp32
weights, fp32 gradients and Adam's two fp32 moments (16 bytes); Megatron-FSDP also a bf16
compute copy (18 bytes); plus the transient measured in the LoRA row of the same shape and
strategy (same activations: LoRA's A matrices keep the same layer inputs alive).

1xH200 (the table in docs/benchmarks.md):
  python bench/lora.py --strategy megatron_fsdp,fsdp2
CPU smoke run (tests/bench/test_bench_lora.py):
  python bench/lora.py --shapes tiny --device cpu --strategy fsdp2 --seq 64 --steps 1
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.sft_throughput import Variant, synthetic_micro_batches, timed_steps

STRATEGIES = ("fsdp2", "megatron_fsdp")
# Bytes per parameter of full fine-tuning with AdamW before activations (see the docstring).
STATE_BYTES_PER_PARAM = {"fsdp2": 16, "megatron_fsdp": 18}
GIB = 2**30


@dataclass(frozen=True)
class Row:
    shape: str
    strategy: str
    lora_rank: int  # 0: full fine-tuning

    @property
    def training(self) -> str:
        return f"LoRA r{self.lora_rank}" if self.lora_rank else "full"


def step_flops(counts: dict[str, int], layers: int, adapter_params: int, timing: Any) -> float:
    """Model FLOPs of one step (the formulas in the module docstring); `adapter_params` 0 for
    full fine-tuning."""
    attention = 6.0 * layers * counts["attention_dim"] * timing.attention
    if adapter_params == 0:
        return 6.0 * counts["matmul"] * timing.tokens + attention
    return 4.0 * counts["matmul"] * timing.tokens + 6.0 * adapter_params * timing.tokens + attention


def full_finetune_need(params: int, strategy: str, transient_bytes: float) -> float:
    """Bytes full fine-tuning with AdamW needs on one GPU: optimizer-side state per parameter
    plus the transient measured for the same shape."""
    return params * STATE_BYTES_PER_PARAM[strategy] + transient_bytes


def run_row(row: Row, args: argparse.Namespace) -> dict[str, Any]:
    """One row in this process; an out-of-memory error becomes the row's result."""
    from trainer.config import ModelConfig, OptimConfig, StrategyConfig
    from trainer.distributed import init_distributed, shutdown
    from trainer.model import build_hf_config, build_model, count_parameters, load_tokenizer
    from trainer.strategies import make_strategy

    env = init_distributed(args.device)
    cuda = env.device.type == "cuda"
    model_cfg = ModelConfig(
        shape=row.shape,
        loss=args.loss,
        lora_rank=row.lora_rank,
        lora_alpha=2.0 * row.lora_rank if row.lora_rank else 16.0,
        target_modules="all-linear",
        activation_checkpointing=args.ac,
        attn_implementation=args.attn,
    )
    result: dict[str, Any] = {
        "shape": row.shape,
        "strategy": row.strategy,
        "lora_rank": row.lora_rank,
    }
    if cuda:
        result["gpu_total_gib"] = torch.cuda.get_device_properties(env.device).total_memory / GIB
    phase = "build"
    try:
        hf_config = build_hf_config(model_cfg, load_tokenizer(model_cfg))
        strategy = make_strategy(StrategyConfig(name=row.strategy, mixed_precision="bf16"), env)
        model = build_model(model_cfg, hf_config, env.device, seed=0)
        result["params"] = sum(p.numel() for p in model.parameters())
        result["trainable"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
        model = strategy.wrap(model)
        phase = "optimizer"
        optimizer = strategy.build_optimizer(model, OptimConfig(lr=1e-5, weight_decay=0.1))
        phase = "steps"
        batches = synthetic_micro_batches(
            Variant(row.strategy, "full"), args, hf_config.vocab_size, args.grad_accum
        )
        if cuda:
            gc.collect()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            result["before_steps_gib"] = torch.cuda.memory_allocated() / GIB
        timing = timed_steps(model, strategy, optimizer, batches, args.warmup, args.steps, env)
    except (torch.OutOfMemoryError, RuntimeError) as err:
        # NCCL and some kernels report an allocation failure as a RuntimeError
        if not isinstance(err, torch.OutOfMemoryError) and "out of memory" not in str(err):
            raise
        result["oom"] = phase
        if cuda:
            result["peak_allocated_gib"] = torch.cuda.max_memory_allocated() / GIB
            result["peak_reserved_gib"] = torch.cuda.max_memory_reserved() / GIB
        return result
    finally:
        shutdown(env)
    counts = count_parameters(hf_config)
    adapters = result["trainable"] if row.lora_rank else 0
    flops = step_flops(counts, hf_config.num_hidden_layers, adapters, timing)
    result.update(
        tokens_per_s=timing.tokens / timing.seconds,
        tflops=flops / timing.seconds / 1e12,
        step_s=timing.seconds,
        loss=timing.loss,
    )
    if cuda:
        peak = torch.cuda.max_memory_allocated()
        result.update(
            peak_allocated_gib=peak / GIB,
            peak_reserved_gib=torch.cuda.max_memory_reserved() / GIB,
            transient_gib=(peak - torch.cuda.memory_allocated()) / GIB,
        )
    return result


def run_in_child(row: Row, args: argparse.Namespace, passthrough: list[str]) -> dict[str, Any]:
    """Run one row in a fresh process; a crash, a hang or a non-OOM error becomes `error`."""
    command = [sys.executable, __file__, *passthrough, "--row", json.dumps(row.__dict__)]
    started = time.time()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.row_timeout)
    except subprocess.TimeoutExpired:
        return {**row.__dict__, "error": f"no result within {args.row_timeout} s"}
    results = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not results:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {**row.__dict__, "error": f"exit {done.returncode}: {last[:200]}"}
    return {**json.loads(results[-1]), "wall_s": time.time() - started}


def _gib(result: dict[str, Any], key: str) -> str:
    return f"{result[key]:.1f}" if key in result else "-"


def print_table(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(
        f"\nseq {args.seq}, micro-batch {args.micro_batch}, grad-accum {args.grad_accum}, "
        f"loss {args.loss}, activation checkpointing {'on' if args.ac else 'off'}, "
        f"median of {args.steps} steps after {args.warmup}\n"
    )
    print(
        "| shape | strategy | training | trainable params | peak allocated GiB | "
        "peak reserved GiB | transient GiB | tokens/s | TFLOP/s | LoRA vs full tokens/s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    full = {(r["shape"], r["strategy"]): r for r in results if r["lora_rank"] == 0}
    for r in results:
        training = f"LoRA r{r['lora_rank']}" if r["lora_rank"] else "full"
        trainable = f"{r['trainable'] / 1e6:,.1f} M" if "trainable" in r else "-"
        if "error" in r:
            speed = f"failed: {r['error']}"
            tflops = ratio = "-"
        elif "oom" in r:
            speed, tflops, ratio = f"OOM ({r['oom']})", "-", "-"
        else:
            speed, tflops = f"{r['tokens_per_s']:,.0f}", f"{r['tflops']:.1f}"
            twin = full.get((r["shape"], r["strategy"]))
            ratio = "-"
            if r["lora_rank"] and twin and "tokens_per_s" in twin:
                ratio = f"{r['tokens_per_s'] / twin['tokens_per_s']:.2f}x"
        print(
            f"| {r['shape']} | {r['strategy']} | {training} | {trainable} | "
            f"{_gib(r, 'peak_allocated_gib')} | {_gib(r, 'peak_reserved_gib')} | "
            f"{_gib(r, 'transient_gib')} | {speed} | {tflops} | {ratio} |"
        )
    for line in need_lines(results):
        print(line)


def need_lines(results: list[dict[str, Any]]) -> list[str]:
    """Full fine-tuning's computed memory need for each shape and strategy that has a LoRA row
    with a measured transient, against the GPU's memory."""
    lines = []
    for r in results:
        if not r["lora_rank"] or "transient_gib" not in r or "gpu_total_gib" not in r:
            continue
        base = r["params"] - r["trainable"]  # the model without its adapters
        state = base * STATE_BYTES_PER_PARAM[r["strategy"]] / GIB
        need = full_finetune_need(base, r["strategy"], r["transient_gib"] * GIB) / GIB
        gap = need - r["gpu_total_gib"]
        verdict = f"does not fit by {gap:.1f} GiB" if gap > 0 else f"fits, {-gap:.1f} GiB spare"
        lines.append(
            f"- {r['shape']} full fine-tune, {r['strategy']}: {base / 1e9:.2f} B params x "
            f"{STATE_BYTES_PER_PARAM[r['strategy']]} B = {state:.1f} GiB + transient "
            f"{r['transient_gib']:.1f} GiB (measured, LoRA row) = {need:.1f} GiB vs "
            f"{r['gpu_total_gib']:.1f} GiB on the GPU: {verdict}{_measured_full(results, r)}"
        )
    return lines


def _measured_full(results: list[dict[str, Any]], lora: dict[str, Any]) -> str:
    """What the full fine-tune row of the same shape and strategy did, when it ran: the
    estimate adds the gradients to the LoRA row's activations, which backward frees as it
    creates gradients, so only a run settles whether it fits."""
    for r in results:
        if r["lora_rank"] or (r["shape"], r["strategy"]) != (lora["shape"], lora["strategy"]):
            continue
        if "oom" in r:
            return f"; measured: out of memory ({r['oom']})"
        if "peak_reserved_gib" in r and "tokens_per_s" in r:
            return (
                f"; measured: it ran, peak {r['peak_allocated_gib']:.1f} GiB allocated, "
                f"{r['peak_reserved_gib']:.1f} GiB reserved"
            )
    return ""


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shapes", "--shape", default="qwen2.5-7b,qwen2-1.5b")
    parser.add_argument("--strategy", default="megatron_fsdp,fsdp2", help="comma-separated")
    parser.add_argument("--lora-rank", type=int, default=64)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--micro-batch", type=int, default=1)
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--loss", default="chunked", choices=["plain", "chunked", "liger"])
    parser.add_argument("--attn", default="sdpa")
    parser.add_argument("--ac", action="store_true", help="activation checkpointing")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--row-timeout", type=int, default=240, help="seconds per row")
    parser.add_argument("--json", dest="json_out", default=None, help="also write results here")
    parser.add_argument("--row", default=None, help=argparse.SUPPRESS)  # internal: one row
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    # what a row's own process gets: everything but the row list and the outputs
    passthrough = [
        f"--{key.replace('_', '-')}={value}"
        for key, value in vars(args).items()
        if key not in ("shapes", "strategy", "row", "json_out", "ac", "row_timeout")
    ] + (["--ac"] if args.ac else [])
    return args, passthrough


def main() -> None:
    args, passthrough = parse_args()
    if args.row is not None:
        print(json.dumps(run_row(Row(**json.loads(args.row)), args)), flush=True)
        return
    strategies = [s for s in args.strategy.split(",") if s]
    if not strategies or set(strategies) - set(STRATEGIES):
        raise SystemExit(f"--strategy: choose from {', '.join(STRATEGIES)}")
    results = []
    for shape in [s for s in args.shapes.split(",") if s]:
        for strategy in strategies:
            for rank in (args.lora_rank, 0):
                row = Row(shape, strategy, rank)
                result = run_in_child(row, args, passthrough)
                results.append(result)
                print(f"[bench] {row}: {json.dumps(result)}", file=sys.stderr, flush=True)
    print_table(results, args)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"args": vars(args), "rows": results}, indent=1))
    if any("error" in r for r in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
