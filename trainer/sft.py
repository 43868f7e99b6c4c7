"""The SFT runner: data -> sharded model -> optimizer steps -> metrics and checkpoints.

One optimizer step consumes one global batch (`data.global_batch_size` rows, all ranks
together). Its loss is the mean over every assistant token in that batch (verl's SFT loss):
each rank sums token losses and divides by the global token count, which is known before
the first forward pass; gradient accumulation over micro-batches is plain summation.

Resume restores weights, Adam state and the step; the data position follows from the step
(see `trainer.data.batching`), and the learning rate is a function of the step, so a run
that stops and resumes computes exactly what an uninterrupted run computes.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.format.layout import step_dir
from trainer.config import ConfigError, SFTConfig, write_resolved_config
from trainer.data.batching import MicroBatch, collate, global_batch, plan_micro_batches, rank_share
from trainer.data.chat import Example
from trainer.data.sft_dataset import load_sft_splits
from trainer.distributed import DistEnv, all_reduce_max, all_reduce_sum, distributed_run
from trainer.metrics import MetricsLogger, bar_postfix, progress_bar
from trainer.model import build_hf_config, build_model, count_parameters, load_tokenizer, write_hf_assets
from trainer.optim import NonFiniteGradientError, clip_grad_norm, lr_at, set_lr
from trainer.resume import new_progress, resume_if_any
from trainer.strategies import make_strategy
from trainer.strategies.base import Strategy

H200_BF16_PEAK_TFLOPS = 790.0  # 1xH200's bf16 matmul peak: bench/matmul_peak.py, best 791 (docs/benchmarks.md)


@dataclass
class SFTResult:
    run_dir: Path
    final_step: int
    resumed_from: int | None
    losses: dict[int, float] = field(default_factory=dict)  # step (1-based) -> train loss
    eval_losses: dict[int, float] = field(default_factory=dict)
    last_checkpoint: Path | None = None


@dataclass
class _Run:
    """Everything one SFT run holds, built once by `run_sft`."""

    cfg: SFTConfig
    env: DistEnv
    strategy: Strategy
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    train: list[Example]
    val: list[Example]
    pad_id: int
    total_steps: int
    flops_per_token: float
    attention_flops_factor: float
    peak_tflops: float | None


def run_sft(cfg: SFTConfig) -> SFTResult:
    with distributed_run(cfg.trainer.device) as env:
        return _run(cfg, env)


def _run(cfg: SFTConfig, env: DistEnv) -> SFTResult:
    _check_config(cfg)
    run_dir = Path(cfg.trainer.run_dir)
    tokenizer = load_tokenizer(cfg.model)
    hf_config = build_hf_config(cfg.model, tokenizer)
    train, val = load_sft_splits(cfg.data, tokenizer, cfg.trainer.seed, progress=env.is_main and cfg.trainer.progress_bar)
    per_epoch = len(train) // cfg.data.global_batch_size
    if per_epoch == 0:
        raise ConfigError(f"data.global_batch_size={cfg.data.global_batch_size} exceeds the {len(train)} training rows")
    total_steps = cfg.trainer.total_steps or cfg.trainer.epochs * per_epoch
    strategy = make_strategy(cfg.strategy, env)
    model = strategy.wrap(build_model(cfg.model, hf_config, env.device, cfg.trainer.seed))
    optimizer = strategy.build_optimizer(model, cfg.optim)
    counts = count_parameters(hf_config)
    run = _Run(
        cfg=cfg, env=env, strategy=strategy, model=model, optimizer=optimizer, train=train, val=val,
        pad_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
        total_steps=total_steps,
        flops_per_token=6.0 * counts["matmul"],
        attention_flops_factor=6.0 * hf_config.num_hidden_layers * counts["attention_dim"],
        peak_tflops=cfg.trainer.peak_tflops or (H200_BF16_PEAK_TFLOPS if env.device.type == "cuda" else None),
    )
    checkpointer = Checkpointer(
        run_dir, strategy=strategy.name, keep_last=cfg.checkpoint.keep_last,
        async_save=cfg.checkpoint.async_save, model_family=hf_config.model_type,
    )
    progress = new_progress(cfg.data.global_batch_size, len(train), cfg.trainer.seed)
    states = {
        "model": strategy.model_state(model),
        "optimizer": strategy.optimizer_state(model, optimizer),
        "extra": progress,
    }
    resume = resume_if_any(checkpointer, cfg.checkpoint.resume, states, hf_config.to_dict())
    start = int(progress["step"])
    result = SFTResult(run_dir=run_dir, final_step=0, resumed_from=start if resume is not None else None)
    if env.is_main:
        write_resolved_config(run_dir, cfg)
        print(
            f"[sft] {strategy.name} on {env.world_size} x {env.device.type}, {hf_config.model_type} "
            f"{counts['matmul'] / 1e6:.1f}M matmul params, {len(train)} train / {len(val)} val rows, "
            f"steps {start} -> {total_steps}" + (f" (resumed from {resume.step_dir})" if resume else ""),
            file=sys.stderr,
        )

    def save(step: int) -> Path:
        progress["step"] = step
        return checkpointer.save(
            step, states,
            hf_assets=lambda target: write_hf_assets(target, hf_config, tokenizer, cfg.model.path),
            info={"train_loss": result.losses.get(step), "total_steps": total_steps},
        )

    metrics = MetricsLogger(run_dir, env.is_main, cfg.trainer)
    bar = progress_bar("sft", total_steps, start, env.is_main and cfg.trainer.progress_bar)
    last_saved = None
    stop = min(total_steps, cfg.trainer.stop_at_step or total_steps)
    try:
        for step in range(start, stop):
            record = _train_step(run, step)
            done = step + 1
            result.losses[done] = record["train/loss"]
            if val and cfg.trainer.eval_every and done % cfg.trainer.eval_every == 0:
                record["val/loss"] = result.eval_losses[done] = evaluate(run)
            if done % cfg.trainer.log_every == 0 or done == stop:
                metrics.log(done, record)
                if not cfg.trainer.progress_bar and env.is_main:
                    print(f"[sft] step {done}/{total_steps} " + " ".join(f"{k}={v}" for k, v in bar_postfix(record).items()),
                          file=sys.stderr)
            bar.set_postfix(bar_postfix(record), refresh=False)
            bar.update(1)
            if cfg.checkpoint.save_every and done % cfg.checkpoint.save_every == 0:
                last_saved = save(done)
        final = max(stop, start)
        if final > start:
            if val and final not in result.eval_losses:
                result.eval_losses[final] = evaluate(run)
                metrics.log(final, {"val/loss": result.eval_losses[final]})
            if last_saved != step_dir(run_dir, final):
                last_saved = save(final)
        elif resume is not None:
            last_saved = resume.step_dir
        checkpointer.close()
    finally:
        bar.close()
        metrics.close()
    result.final_step = final
    result.last_checkpoint = last_saved
    return result


def _check_config(cfg: SFTConfig) -> None:
    data = cfg.data
    if data.global_batch_size < 1:
        raise ConfigError("data.global_batch_size must be >= 1")
    if data.packing and data.max_tokens_per_micro_batch < data.max_length:
        raise ConfigError(
            f"data.max_tokens_per_micro_batch={data.max_tokens_per_micro_batch} < data.max_length={data.max_length}: "
            "a full-length sequence would not fit in a micro-batch"
        )
    if not 0 <= data.val_ratio < 1:
        raise ConfigError(f"data.val_ratio must be in [0, 1), got {data.val_ratio}")
    if cfg.trainer.log_every < 1:
        raise ConfigError("trainer.log_every must be >= 1")


def _micro_batches(run: _Run, examples: list[Example], rows: list[int]) -> list[MicroBatch]:
    """This rank's micro-batches for `rows`, as many as the busiest rank needs."""
    data = run.cfg.data
    mine = {row: examples[row] for row in rows}
    groups = plan_micro_batches(mine, data.packing, data.max_tokens_per_micro_batch, data.micro_batch_size)
    count = all_reduce_max(len(groups), run.env.device)
    groups = plan_micro_batches(mine, data.packing, data.max_tokens_per_micro_batch, data.micro_batch_size, count)
    return [collate([examples[row] for row in group], data.packing, run.pad_id) for group in groups]


def _train_step(run: _Run, step: int) -> dict[str, Any]:
    cfg, env = run.cfg, run.env
    started = time.perf_counter()
    rows = rank_share(
        global_batch(len(run.train), cfg.data.global_batch_size, step, cfg.trainer.seed, cfg.data.shuffle),
        env.rank, env.world_size,
    )
    micro_batches = _micro_batches(run, run.train, rows)
    local_targets = sum(mb.targets for mb in micro_batches)
    local_tokens = sum(mb.tokens for mb in micro_batches)
    local_attention = sum(n * n for mb in micro_batches for n in mb.doc_lengths)
    global_targets, global_tokens, global_attention = all_reduce_sum(
        [local_targets, local_tokens, local_attention], env.device
    )
    scale = env.world_size / max(global_targets, 1.0)  # both strategies average gradients over ranks
    loss_sum = torch.zeros((), dtype=torch.float32, device=env.device)
    for micro_batch in micro_batches:
        batch_loss = run.model(**micro_batch.to(env.device).inputs)
        (batch_loss * scale).backward()
        loss_sum += batch_loss.detach().float()
    run.strategy.before_optimizer_step(run.model)
    grad_norm = clip_grad_norm(
        run.strategy.trainable_params(run.model, run.optimizer), cfg.optim.clip_grad, env.device
    )
    if not math.isfinite(grad_norm):
        raise NonFiniteGradientError(f"step {step + 1}: gradient norm is {grad_norm}; stopping before the update")
    lr = lr_at(step, cfg.optim, run.total_steps)
    set_lr(run.optimizer, lr)
    run.optimizer.step()
    run.strategy.zero_grad(run.optimizer)
    (total_loss,) = all_reduce_sum([float(loss_sum.item())], env.device)
    if env.device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    flops = run.flops_per_token * global_tokens + run.attention_flops_factor * global_attention
    tflops_per_device = flops / seconds / env.world_size / 1e12
    record = {
        "train/loss": total_loss / max(global_targets, 1.0),
        "train/lr": lr,
        "train/grad_norm": grad_norm,
        "train/tokens": int(global_tokens),
        "train/loss_tokens": int(global_targets),
        "train/micro_batches": len(micro_batches),
        "perf/step_s": seconds,
        "perf/tokens_per_s": global_tokens / seconds,
        "perf/tokens_per_s_per_device": global_tokens / seconds / env.world_size,
        "perf/tflops_per_device": tflops_per_device,
        "perf/mfu": tflops_per_device / run.peak_tflops if run.peak_tflops else None,
    }
    if env.device.type == "cuda":
        record["perf/peak_mem_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return record


@torch.no_grad()
def evaluate(run: _Run) -> float:
    """Mean token loss over the whole validation set (every rank takes a strided share)."""
    rows = rank_share(list(range(len(run.val))), run.env.rank, run.env.world_size)
    loss_sum, targets = 0.0, 0
    for micro_batch in _micro_batches(run, run.val, rows):
        loss_sum += float(run.model(**micro_batch.to(run.env.device).inputs).item())
        targets += micro_batch.targets
    total, count = all_reduce_sum([loss_sum, targets], run.env.device)
    return total / max(count, 1.0)
