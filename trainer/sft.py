"""The SFT runner: data -> sharded model -> optimizer steps -> metrics and checkpoints.

One optimizer step consumes one global batch (`data.global_batch_size` rows, all ranks
together). Its loss is the mean over every assistant token in that batch (verl's
sft_trainer): each rank sums token losses and divides by the global token count, which is
known before the first forward pass; gradient accumulation over micro-batches is plain
summation. `data.loss_normalization=micro_batch` takes verl's fsdp_sft_trainer's loss
instead, the mean of each micro-batch's own token mean (`loss_weight`).

Resume restores weights, Adam state and the step; the data position follows from the step
(see `trainer.data.batching`), and the learning rate is a function of the step, so a run
that stops and resumes computes exactly what an uninterrupted run computes.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from mfsdp_ckpt.format.layout import step_dir
from trainer.config import SFTConfig
from trainer.data.batching import MicroBatch, collate, global_batch, plan_micro_batches, rank_share
from trainer.data.chat import Example
from trainer.data.sft_dataset import load_sft_splits
from trainer.distributed import DistEnv, all_reduce_max, all_reduce_sum
from trainer.grpo.aggregation import LossNormalization
from trainer.machines_read import check_splits_read_alike
from trainer.metrics import MetricsLogger, bar_postfix
from trainer.mfu_peak import peak_tflops
from trainer.model import (
    build_hf_config,
    build_model,
    count_parameters,
    eval_mode,
    load_tokenizer,
    padding_id,
    write_hf_assets,
)
from trainer.progress import draws_bars
from trainer.resume import RunKind
from trainer.runner import (
    RunResult,
    StepHooks,
    TrainingRun,
    checked_steps,
    optimizer_update,
    run_in_process_group,
)
from trainer.strategies import make_strategy
from trainer.strategies.base import Strategy

SFT_RUN = RunKind("sft", "data.global_batch_size", ("data.train_files", "data.val_ratio"))


@dataclass
class SFTResult(RunResult):
    losses: dict[int, float] = field(default_factory=dict)  # step (1-based) -> train loss
    eval_losses: dict[int, float] = field(default_factory=dict)


@dataclass
class SFTSteps(StepHooks):
    """What an SFT step needs besides the shared `TrainingRun`, and the SFT step itself: the
    hooks `TrainingRun.loop` calls."""

    run: TrainingRun
    strategy: Strategy
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    train: Sequence[Example]
    val: Sequence[Example]
    pad_id: int
    flops_per_token: float
    attention_flops_factor: float
    peak_tflops: float | None
    result: SFTResult

    def after_step(self, done: int, record: dict[str, Any], metrics: MetricsLogger) -> None:
        cfg, run = self.cfg, self.run
        self.result.losses[done] = record["train/loss"]
        # the last step's validation is in its record, as GRPO's is: it was a second record
        # of that step, logged after it
        if self.val and (run.is_due(cfg.trainer.eval_every, done) or done == run.stop):
            record["val/loss"] = self._validate(done)
        if run.should_log(done, record):
            metrics.log(done, record)
        if run.is_due(cfg.checkpoint.save_every, done):
            self._save(done)

    def bar_postfix(self, record: dict[str, Any]) -> dict[str, str]:
        return bar_postfix(record)

    def after_last_step(self, metrics: MetricsLogger) -> None:
        """The final save; `after_step` validated the last step and logged it."""
        run, final = self.run, self.run.final_step
        if final <= run.start:
            return
        if run.last_saved != step_dir(run.run_dir, final):
            self._save(final)

    def _validate(self, done: int) -> float:
        """The validation loss after step `done`, kept in the result; a warning when it is
        not finite (`TrainingRun.warn_non_finite`)."""
        loss = self.result.eval_losses[done] = self.evaluate()
        self.run.warn_non_finite(done, {"val/loss": loss})
        return loss

    def _save(self, step: int) -> None:
        self.run.save(
            step,
            info={"train_loss": self.result.losses.get(step), "total_steps": self.run.total_steps},
        )

    def _micro_batches(self, examples: Sequence[Example], rows: list[int]) -> list[MicroBatch]:
        """This rank's micro-batches for `rows`, as many as the busiest rank needs."""
        data = self.cfg.data
        mine = {row: examples[row] for row in rows}
        limits = (data.packing, data.max_tokens_per_micro_batch, data.micro_batch_size)
        count = all_reduce_max(len(plan_micro_batches(mine, *limits)), self.env.device)
        groups = plan_micro_batches(mine, *limits, count)
        return [
            collate([examples[row] for row in group], data.packing, self.pad_id) for group in groups
        ]

    def train_step(self, step: int) -> dict[str, Any]:
        """One optimizer step on the global batch of `step`. The model returns each micro-batch's
        summed token loss; weighted by `loss_weight` and scaled by world_size, the gradients,
        once the strategy averages them over ranks, are those of the loss
        `data.loss_normalization` names (by default the mean loss per target token of the
        global batch), however rows and padding fall across ranks and micro-batches. A
        non-finite gradient norm stops the run before the update, so no checkpoint holds the
        weights it would make."""
        cfg, env = self.cfg, self.env
        started = time.perf_counter()
        batch = global_batch(
            len(self.train), cfg.data.global_batch_size, step, cfg.trainer.seed, cfg.data.shuffle
        )
        rows = rank_share(batch, env.rank, env.world_size)
        micro_batches = self._micro_batches(self.train, rows)
        local_targets = sum(mb.targets for mb in micro_batches)
        local_tokens = sum(mb.tokens for mb in micro_batches)
        local_attention = sum(n * n for mb in micro_batches for n in mb.doc_lengths)
        local_count = sum(1 for mb in micro_batches if mb.tokens)
        global_targets, global_tokens, global_attention, global_count = all_reduce_sum(
            [local_targets, local_tokens, local_attention, local_count], env.device
        )
        loss_sum = torch.zeros((), dtype=torch.float32, device=env.device)
        for micro_batch in micro_batches:
            weight = loss_weight(
                cfg.data.loss_normalization, micro_batch.targets, global_targets, global_count
            )
            batch_loss = self.model(**micro_batch.to(env.device).inputs) * weight
            # both strategies average gradients over ranks
            (batch_loss * env.world_size).backward()
            loss_sum += batch_loss.detach().float()
        grad_norm = optimizer_update(self.run, self.strategy, self.model, self.optimizer, step)
        lr = self.run.lr(step)
        (total_loss,) = all_reduce_sum([float(loss_sum.item())], env.device)
        if env.device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - started
        flops = (
            self.flops_per_token * global_tokens + self.attention_flops_factor * global_attention
        )
        tflops_per_device = flops / seconds / env.world_size / 1e12
        record = {
            "train/loss": total_loss,
            "train/lr": lr,
            "train/grad_norm": grad_norm,
            "train/tokens": int(global_tokens),
            "train/loss_tokens": int(global_targets),
            # the step's, all ranks: rank 0's own count, with the empty filler micro-batches
            # that keep ranks in step, followed the rank count
            "train/micro_batches": int(global_count),
            "perf/step_s": seconds,
            "perf/tokens_per_s": global_tokens / seconds,
            "perf/tokens_per_s_per_device": global_tokens / seconds / env.world_size,
            "perf/tflops_per_device": tflops_per_device,
            "perf/mfu": tflops_per_device / self.peak_tflops if self.peak_tflops else None,
        }
        if env.device.type == "cuda":
            record["perf/peak_mem_gib"] = torch.cuda.max_memory_allocated() / 2**30
        return record

    @torch.no_grad()
    def evaluate(self) -> float:
        """Mean token loss over the whole validation set (every rank takes a strided share),
        dropout off (`eval_mode`)."""
        rows = rank_share(list(range(len(self.val))), self.env.rank, self.env.world_size)
        loss_sum, targets = 0.0, 0
        with eval_mode(self.model):
            for micro_batch in self._micro_batches(self.val, rows):
                loss_sum += float(self.model(**micro_batch.to(self.env.device).inputs).item())
                targets += micro_batch.targets
        total, count = all_reduce_sum([loss_sum, targets], self.env.device)
        return total / max(count, 1.0)


def loss_weight(
    normalization: LossNormalization, targets: int, global_targets: float, micro_batches: float
) -> float:
    """What a micro-batch's summed token loss is multiplied by so that the sum over all
    micro-batches of all ranks is the step's loss. `global` (verl's sft_trainer): one mean
    over the `global_targets` target tokens of the global batch. `micro_batch` (verl's
    fsdp_sft_trainer, `_compute_loss_and_backward`: its loss over its own valid tokens, over
    the micro-batches per rank, ranks averaged): the mean of the `micro_batches` (non-empty)
    micro-batches' own token means, so a micro-batch of few target tokens weighs as much as
    one of many. A micro-batch with no target contributes nothing either way."""
    if normalization == "micro_batch":
        return 1.0 / (max(targets, 1) * max(micro_batches, 1.0))
    return 1.0 / max(global_targets, 1.0)


def _trained_tokens(row: Example) -> tuple[list[int]]:
    """A row as the resume digest sees it: the tokens it trains on (its responses). The
    prompt's tokens are left out: a chat template may print the date (Llama 3's system
    header does), so the same rows tokenize differently on another day and every such resume
    warned that the rows had changed. The prompt's text, as the data file holds it, has a
    digest of its own (`Example.prompt`)."""
    return ([token for token, trained in zip(row.input_ids, row.loss_mask) if trained],)


def run_sft(cfg: SFTConfig) -> SFTResult:
    """Run this process's rank of an SFT run: it joins torchrun's group when RANK and
    WORLD_SIZE are set, else it trains alone as a one-rank group, destroyed when it returns
    or fails. `cfg` is meant to come from `cli.launch.load_checked_config`: the run-dir,
    local-path and model-file checks happen there (before torch loads), not here, and so
    do each key's range and the keys' agreement (`load_config`: a packed micro-batch budget
    below data.max_length), in every rank and on every resume."""
    return run_in_process_group("sft", cfg, _run)


def _run(cfg: SFTConfig, env: DistEnv) -> SFTResult:
    """Build everything one rank's SFT run needs, in the order each piece needs the ones before
    it: the data are read and checked before any model is built (a bad file fails in
    seconds, not after minutes of loading), so is the step to resume (`check_resume_target`),
    and `TrainingRun.open` checks a resume against the rows as tokenized now. The throughput
    figures use the usual training FLOPs: 6 per matmul parameter per token (2 forward, 4
    backward), and for attention 6 x layers x attention width x the sum of each document's
    squared length (packed documents do not attend to each other)."""
    tokenizer = load_tokenizer(cfg.model)
    hf_config = build_hf_config(cfg.model, tokenizer)
    train, val = load_sft_splits(
        cfg.data,
        tokenizer,
        cfg.trainer.seed,
        progress=draws_bars(env.is_main and cfg.trainer.progress_bar),
    )
    digests = check_splits_read_alike(
        cfg.model, tokenizer, hf_config, (train, val), _trained_tokens
    )
    batch_size = cfg.data.global_batch_size
    total_steps = checked_steps(SFT_RUN, cfg, hf_config, batch_size, len(train), "training rows")
    strategy = make_strategy(cfg.strategy, env)
    model = strategy.wrap(build_model(cfg.model, hf_config, env.device, cfg.trainer.seed))
    optimizer = strategy.build_optimizer(model, cfg.optim)
    counts = count_parameters(hf_config)
    run = TrainingRun.open(
        SFT_RUN,
        cfg,
        env,
        strategy=strategy,
        model=model,
        optimizer=optimizer,
        hf_config=hf_config,
        hf_assets=lambda target: write_hf_assets(target, hf_config, tokenizer, cfg.model.path),
        batch_size=batch_size,
        train_rows=len(train),
        digests=digests,
        total_steps=total_steps,
    )
    run.announce(
        f"{strategy.name} on {env.world_size} x {env.device.type}, {hf_config.model_type} "
        f"{counts['matmul'] / 1e6:.1f}M matmul params, {len(train)} train / {len(val)} val rows"
    )
    steps = SFTSteps(
        run=run,
        strategy=strategy,
        model=model,
        optimizer=optimizer,
        train=train,
        val=val,
        pad_id=padding_id(tokenizer),
        flops_per_token=6.0 * counts["matmul"],
        attention_flops_factor=6.0 * hf_config.num_hidden_layers * counts["attention_dim"],
        peak_tflops=_peak_tflops(cfg.trainer.peak_tflops, env, run.start < run.stop),
        result=SFTResult(run_dir=run.run_dir, final_step=0, resumed_from=run.resumed_from),
    )
    run.loop(steps)
    return run.finish(steps.result)


def _peak_tflops(configured: float | None, env: DistEnv, trains: bool) -> float | None:
    """The peak MFU is read against (`mfu_peak.peak_tflops` for this rank's device); the
    main rank says so where MFU is left out on a GPU of a run that trains."""
    name = torch.cuda.get_device_name(env.device) if env.device.type == "cuda" else None
    peak, note = peak_tflops(configured, name)
    if note is not None and env.is_main and trains:
        print(f"[sft] {note}", file=sys.stderr)
    return peak
