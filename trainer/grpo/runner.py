"""The GRPO runner: prompts -> rollouts -> rewards -> group advantages -> PPO updates -> weight push.

Per step, on every data-parallel rank for its share of the step's prompts: roll out n
responses per prompt with the rollout engine; score them; group advantages; recompute the
old log-probs with the actor and the reference log-probs with the frozen reference (sharded
like the actor); update the actor over mini-batches and micro-batches (`ppo_epochs` passes);
push the new weights into the engine. A prompt's n responses stay on one rank, so groups
never span ranks; losses are normalized by global counts (`aggregation`).

Everything random is a function of (seed, step, rank): which prompts a step takes
(`trainer.data.batching.global_batch`), the rollout's sampling seed, the mini-batch shuffle.
So resume needs only the step, the weights and the optimizer, and a resumed run computes what
an uninterrupted run computes. The reference model is rebuilt from the initial weights
(`model.path`, or the shape and seed), recorded in every checkpoint's manifest.
"""

from __future__ import annotations

import math
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.format.layout import step_dir
from trainer.config import ConfigError, write_resolved_config
from trainer.data.batching import global_batch, rank_share
from trainer.distributed import DistEnv, all_reduce_sum, distributed_run
from trainer.grpo.actor import RolloutData, attach_logprob_forward, compute_log_probs, left_pad, micro_batch_loss, UpdateStats
from trainer.grpo.advantage import grpo_token_advantages
from trainer.grpo.aggregation import LossScale
from trainer.grpo.config import GRPOConfig
from trainer.grpo.data import RLPrompt, load_rl_prompts
from trainer.grpo.weights import iter_full_weights
from trainer.lora import lora_enabled, refuse_lora
from trainer.metrics import MetricsLogger, progress_bar
from trainer.model import build_hf_config, build_model, load_tokenizer, write_hf_assets
from trainer.optim import NonFiniteGradientError, clip_grad_norm, lr_at, set_lr
from trainer.resume import new_progress, resume_if_any
from trainer.rewards.dispatch import RewardScorer
from trainer.rollout.base import RolloutEngine, SamplingParams
from trainer.rollout.build import build_rollout_engine, engine_name
from trainer.strategies import make_strategy
from trainer.strategies.base import Strategy

ROLLOUT_ASSETS_DIR = "rollout_model"


@dataclass
class GRPOResult:
    run_dir: Path
    final_step: int
    resumed_from: int | None
    rewards: dict[int, float] = field(default_factory=dict)  # step -> mean train reward
    val_accuracy: dict[int, float] = field(default_factory=dict)
    last_checkpoint: Path | None = None


@dataclass
class _Run:
    cfg: GRPOConfig
    env: DistEnv
    strategy: Strategy
    actor: torch.nn.Module
    optimizer: torch.optim.Optimizer
    reference: torch.nn.Module | None
    engine: RolloutEngine
    scorer: RewardScorer
    tokenizer: Any
    pad_id: int
    train: list[RLPrompt]
    val: list[RLPrompt]
    total_steps: int


def run_grpo(cfg: GRPOConfig) -> GRPOResult:
    with distributed_run(cfg.trainer.device) as env:
        return _run(cfg, env)


def check_config(cfg: GRPOConfig, world_size: int) -> None:
    """Batch arithmetic that must hold before anything starts; each message names the keys."""
    data, actor, n = cfg.data, cfg.actor, cfg.rollout.n
    for key, value in (("data.train_batch_size", data.train_batch_size), ("actor.ppo_mini_batch_size", actor.ppo_mini_batch_size),
                       ("actor.ppo_micro_batch_size_per_gpu", actor.ppo_micro_batch_size_per_gpu),
                       ("actor.log_prob_micro_batch_size_per_gpu", actor.log_prob_micro_batch_size_per_gpu),
                       ("actor.ppo_epochs", actor.ppo_epochs), ("rollout.n", n)):
        if value < 1:
            raise ConfigError(f"{key} must be >= 1, got {value}")
    if data.train_batch_size % actor.ppo_mini_batch_size:
        raise ConfigError(f"data.train_batch_size={data.train_batch_size} must be a multiple of "
                          f"actor.ppo_mini_batch_size={actor.ppo_mini_batch_size}")
    if actor.ppo_mini_batch_size % world_size:
        raise ConfigError(f"actor.ppo_mini_batch_size={actor.ppo_mini_batch_size} prompts must split evenly over "
                          f"{world_size} ranks")
    if (actor.ppo_mini_batch_size // world_size * n) % actor.ppo_micro_batch_size_per_gpu:
        raise ConfigError(f"a rank's mini-batch ({actor.ppo_mini_batch_size // world_size} prompts x rollout.n={n}) "
                          f"must be a multiple of actor.ppo_micro_batch_size_per_gpu={actor.ppo_micro_batch_size_per_gpu}")
    if cfg.trainer.log_every < 1:
        raise ConfigError("trainer.log_every must be >= 1")
    refuse_lora(lora_enabled(cfg.model), "GRPO")


@contextmanager
def _timed(times: dict[str, float], key: str, device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    yield
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    times[key] = times.get(key, 0.0) + time.perf_counter() - started


def _build_policy(cfg: GRPOConfig, hf_config: Any, strategy: Strategy, env: DistEnv) -> torch.nn.Module:
    model = build_model(cfg.model, hf_config, env.device, cfg.trainer.seed)
    attach_logprob_forward(model)
    return strategy.wrap(model)


def _rollout_dtype(cfg: GRPOConfig, device: torch.device) -> torch.dtype:
    choice = cfg.rollout.dtype
    if choice == "auto":
        choice = "bf16" if device.type == "cuda" else "fp32"
    return torch.bfloat16 if choice == "bf16" else torch.float32


def _run(cfg: GRPOConfig, env: DistEnv) -> GRPOResult:
    check_config(cfg, env.world_size)
    if not cfg.data.train_files:
        raise ConfigError("data.train_files: no training files given")
    run_dir = Path(cfg.trainer.run_dir)
    show = env.is_main and cfg.trainer.progress_bar
    tokenizer = load_tokenizer(cfg.model)
    hf_config = build_hf_config(cfg.model, tokenizer)
    train, dropped = load_rl_prompts(cfg.data.train_files, cfg.data, tokenizer, progress=show)
    val = load_rl_prompts(cfg.data.val_files, cfg.data, tokenizer, limit=cfg.data.val_max_samples)[0] if cfg.data.val_files else []
    per_epoch = len(train) // cfg.data.train_batch_size
    if per_epoch == 0:
        raise ConfigError(f"data.train_batch_size={cfg.data.train_batch_size} exceeds the {len(train)} usable training prompts")
    total_steps = cfg.trainer.total_steps or cfg.trainer.epochs * per_epoch
    strategy = make_strategy(cfg.strategy, env)
    actor = _build_policy(cfg, hf_config, strategy, env)
    optimizer = strategy.build_optimizer(actor, cfg.optim)
    reference = _build_policy(cfg, hf_config, strategy, env).eval() if cfg.actor.use_kl_loss else None
    max_model_len = cfg.data.max_prompt_length + cfg.rollout.max_response_length
    name = engine_name(cfg.rollout.name)
    engine = build_rollout_engine(
        name, hf_config=hf_config, tokenizer=tokenizer, model_path=cfg.model.path,
        assets_dir=run_dir / ROLLOUT_ASSETS_DIR / f"rank{env.rank}",
        write_assets=lambda target: write_hf_assets(target, hf_config, tokenizer, cfg.model.path),
        device=env.device, dtype=_rollout_dtype(cfg, env.device), max_model_len=max_model_len,
        seed=cfg.trainer.seed + env.rank, gpu_memory_utilization=cfg.rollout.gpu_memory_utilization,
        enforce_eager=cfg.rollout.enforce_eager, cuda_graphs=cfg.rollout.cuda_graphs, fused_ops=cfg.rollout.fused_ops,
        max_num_seqs=cfg.rollout.max_num_seqs,
    )
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    run = _Run(cfg, env, strategy, actor, optimizer, reference, engine, RewardScorer(cfg.reward.path, cfg.reward.name),
               tokenizer, pad_id, train, val, total_steps)

    reference_source = {"path": cfg.model.path, "shape": cfg.model.shape if cfg.model.path is None else None,
                        "random_init": cfg.model.random_init, "seed": cfg.trainer.seed}
    checkpointer = Checkpointer(run_dir, strategy=strategy.name, keep_last=cfg.checkpoint.keep_last,
                                async_save=cfg.checkpoint.async_save, model_family=hf_config.model_type)
    progress = new_progress(cfg.data.train_batch_size, len(train), cfg.trainer.seed)
    states = {"model": strategy.model_state(actor), "optimizer": strategy.optimizer_state(actor, optimizer), "extra": progress}
    resume = resume_if_any(checkpointer, cfg.checkpoint.resume, states, hf_config.to_dict())
    start = int(progress["step"])
    result = GRPOResult(run_dir=run_dir, final_step=0, resumed_from=start if resume is not None else None)
    if env.is_main:
        write_resolved_config(run_dir, cfg)
        print(f"[grpo] {strategy.name} on {env.world_size} x {env.device.type}, rollout {name}, {len(train)} train prompts"
              f" ({dropped} over data.max_prompt_length dropped), {len(val)} val, steps {start} -> {total_steps}"
              + (f" (resumed from {resume.step_dir})" if resume else ""), file=sys.stderr)

    def save(step: int, record: dict[str, Any]) -> Path:
        progress["step"] = step
        return checkpointer.save(
            step, states, hf_assets=lambda target: write_hf_assets(target, hf_config, tokenizer, cfg.model.path),
            info={"reference_model": reference_source, "total_steps": total_steps,
                  "reward_mean": record.get("reward/mean"), "rollout": name},
        )

    times: dict[str, float] = {}
    with _timed(times, "timing/weight_push_s", env.device):
        push_weights(run)
    metrics = MetricsLogger(run_dir, env.is_main, cfg.trainer)
    if val and cfg.trainer.val_before_train and start == 0:
        metrics.log(0, validate(run))
    bar = progress_bar("grpo", total_steps, start, show)
    stop = min(total_steps, cfg.trainer.stop_at_step or total_steps)
    last_saved = resume.step_dir if resume is not None else None
    try:
        for step in range(start, stop):
            record = train_step(run, step)
            done = step + 1
            result.rewards[done] = record["reward/mean"]
            if val and cfg.trainer.eval_every and done % cfg.trainer.eval_every == 0:
                record.update(validate(run))
                result.val_accuracy[done] = record["val/accuracy"]
            if (cfg.checkpoint.save_every and done % cfg.checkpoint.save_every == 0) or done == stop:
                timing: dict[str, float] = {}
                with _timed(timing, "timing/checkpoint_s", env.device):
                    last_saved = save(done, record)
                record.update(timing)
            if done % cfg.trainer.log_every == 0 or done == stop:
                metrics.log(done, record)
            bar.set_postfix(_postfix(record), refresh=False)
            bar.update(1)
        if val and stop > start and stop not in result.val_accuracy:
            final = validate(run)
            result.val_accuracy[stop] = final["val/accuracy"]
            metrics.log(stop, final)
        checkpointer.close()
    finally:
        bar.close()
        metrics.close()
        engine.close()
    result.final_step = max(stop, start)
    result.last_checkpoint = last_saved if last_saved is not None else (step_dir(run_dir, start) if resume else None)
    return result


def _postfix(record: dict[str, Any]) -> dict[str, str]:
    shown = {"reward": f"{record['reward/mean']:.3f}", "len": f"{record['response/length_mean']:.0f}",
             "kl": f"{record.get('actor/kl_loss', 0.0):.4f}", "tok/s": f"{record['perf/tokens_per_s']:.0f}"}
    if "val/accuracy" in record:
        shown["val"] = f"{record['val/accuracy']:.3f}"
    return shown


def push_weights(run: _Run) -> None:
    """Gather the actor's weights (collective) and load them into this rank's rollout engine."""
    run.engine.update_weights(iter_full_weights(run.strategy.model_state(run.actor).state_dict()))


def _score(run: _Run, prompts: list[RLPrompt], prompt_index: list[int], responses: list[list[int]]):
    texts = run.tokenizer.batch_decode(responses, skip_special_tokens=True)
    rows = [prompts[i] for i in prompt_index]
    return run.scorer([r.data_source for r in rows], texts, [r.ground_truth for r in rows], [r.extra_info for r in rows])


def train_step(run: _Run, step: int) -> dict[str, Any]:
    cfg, env = run.cfg, run.env
    times: dict[str, float] = {}
    started = time.perf_counter()
    rows = rank_share(global_batch(len(run.train), cfg.data.train_batch_size, step, cfg.trainer.seed, cfg.data.shuffle),
                      env.rank, env.world_size)
    prompts = [run.train[i] for i in rows]
    params = SamplingParams(n=cfg.rollout.n, temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p,
                            top_k=cfg.rollout.top_k, max_tokens=cfg.rollout.max_response_length,
                            seed=(cfg.trainer.seed * 1_000_003 + step) * 4096 + env.rank,
                            logprobs=cfg.rollout.temperature == 1.0)
    with _timed(times, "timing/rollout_s", env.device):
        batch = run.engine.generate([p.prompt_ids for p in prompts], params)
    responses = batch.token_lists()
    with _timed(times, "timing/reward_s", env.device):
        scores = _score(run, prompts, batch.prompt_index, responses)
    rewards = torch.tensor(scores.rewards, dtype=torch.float32)
    prompt_ids, prompt_mask = left_pad([prompts[i].prompt_ids for i in batch.prompt_index], run.pad_id)
    data = RolloutData(prompt_ids, prompt_mask, batch.response_ids, batch.response_mask)
    data.advantages = grpo_token_advantages(rewards, data.response_mask, batch.prompt_index,
                                            cfg.algorithm.epsilon, cfg.algorithm.norm_adv_by_std_in_grpo)
    micro = cfg.actor.log_prob_micro_batch_size_per_gpu
    with _timed(times, "timing/old_log_prob_s", env.device):
        data.old_log_probs = compute_log_probs(run.actor, data, micro, cfg.rollout.temperature, env.device)
    mismatch = 0.0
    if batch.logprobs is not None:  # the engine and the actor score the same tokens with the same weights
        mismatch = float(((batch.logprobs - data.old_log_probs).abs() * data.response_mask).sum())
    if run.reference is not None:
        with _timed(times, "timing/ref_log_prob_s", env.device):
            data.ref_log_probs = compute_log_probs(run.reference, data, micro, cfg.rollout.temperature, env.device)
    with _timed(times, "timing/update_s", env.device):
        update = update_policy(run, data, step)
    with _timed(times, "timing/weight_push_s", env.device):
        push_weights(run)
    lengths = data.response_mask.sum(1).float()
    response_tokens, prompt_tokens = float(lengths.sum()), float(prompt_mask.sum())
    (reward_sum, reward_sq, accuracy_sum, count, truncated, tokens, prompt_total, mismatch) = all_reduce_sum(
        [float(rewards.sum()), float((rewards ** 2).sum()), sum(scores.accuracy), len(responses),
         float((lengths >= cfg.rollout.max_response_length).sum()), response_tokens, prompt_tokens, mismatch], env.device)
    length_max = _all_reduce_max_float(float(lengths.max()), env.device)
    mean = reward_sum / count
    seconds = time.perf_counter() - started
    record = {
        "reward/mean": mean,
        "reward/std": math.sqrt(max(reward_sq / count - mean * mean, 0.0)),
        "reward/accuracy": accuracy_sum / count,
        "response/length_mean": tokens / count,
        "response/length_max": length_max,
        "response/clip_ratio": truncated / count,
        **update,
        **times,
        # mean |log p_engine - log p_actor| per response token: 0 up to precision when the weight push works
        "rollout/actor_logprob_diff": mismatch / max(tokens, 1.0) if batch.logprobs is not None else None,
        "timing/step_s": seconds,
        "perf/tokens_per_s": (tokens + prompt_total) / seconds,
        "perf/rollout_tokens_per_s": tokens / max(times["timing/rollout_s"], 1e-9) / env.world_size,
    }
    return record


def _all_reduce_max_float(value: float, device: torch.device) -> float:
    import torch.distributed as dist

    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return float(tensor.item())


def update_policy(run: _Run, data: RolloutData, step: int) -> dict[str, float]:
    """`ppo_epochs` passes over this rank's rollouts in shuffled mini-batches, one optimizer step each."""
    cfg, env = run.cfg, run.env
    actor_cfg = cfg.actor
    per_rank_mini = actor_cfg.ppo_mini_batch_size // env.world_size * cfg.rollout.n
    lr = lr_at(step, cfg.optim, run.total_steps)
    totals, grad_norms, updates = UpdateStats(), [], 0
    run.actor.train()
    for epoch in range(actor_cfg.ppo_epochs):
        shuffle = torch.Generator().manual_seed((cfg.trainer.seed * 1_000_003 + step) * 64 + epoch)
        order = torch.randperm(data.rows, generator=shuffle)
        for start in range(0, data.rows, per_rank_mini):
            mini = order[start : start + per_rank_mini]
            micro_batches = [mini[i : i + actor_cfg.ppo_micro_batch_size_per_gpu]
                             for i in range(0, len(mini), actor_cfg.ppo_micro_batch_size_per_gpu)]
            scale = LossScale.of([data.response_mask[m].to(env.device) for m in micro_batches],
                                 norm_length=cfg.rollout.max_response_length)
            stats = UpdateStats()
            for rows in micro_batches:
                loss = micro_batch_loss(run.actor, data, rows, actor_cfg, scale, cfg.rollout.temperature, env.device, stats)
                loss.backward()
            run.strategy.before_optimizer_step(run.actor)
            grad_norm = clip_grad_norm(run.strategy.trainable_params(run.actor, run.optimizer), cfg.optim.clip_grad, env.device)
            if not math.isfinite(grad_norm):
                raise NonFiniteGradientError(f"step {step + 1}: gradient norm is {grad_norm}; stopping before the update")
            set_lr(run.optimizer, lr)
            run.optimizer.step()
            run.strategy.zero_grad(run.optimizer)
            grad_norms.append(grad_norm)
            reduced = all_reduce_sum([getattr(stats, k) for k in vars(stats)], env.device)
            for key, value in zip(vars(stats), reduced):
                setattr(totals, key, getattr(totals, key) + value / scale.dp_size)
            updates += 1
    record = {f"actor/{key}": value / updates for key, value in vars(totals).items()}
    if not actor_cfg.use_kl_loss:
        record.pop("actor/kl_loss")
    record.update({"actor/grad_norm": sum(grad_norms) / len(grad_norms), "actor/lr": lr, "actor/updates": updates})
    return record


@torch.no_grad()
def validate(run: _Run) -> dict[str, float]:
    """Greedy, one response per validation prompt; mean reward and accuracy over all of them."""
    cfg, env = run.cfg, run.env
    rows = rank_share(list(range(len(run.val))), env.rank, env.world_size)
    prompts = [run.val[i] for i in rows]
    reward_sum = accuracy_sum = 0.0
    if prompts:
        batch = run.engine.generate([p.prompt_ids for p in prompts],
                                    SamplingParams(temperature=0, max_tokens=cfg.rollout.max_response_length))
        scores = _score(run, prompts, batch.prompt_index, batch.token_lists())
        reward_sum, accuracy_sum = sum(scores.rewards), sum(scores.accuracy)
    reward_sum, accuracy_sum, count = all_reduce_sum([reward_sum, accuracy_sum, len(prompts)], env.device)
    return {"val/reward": reward_sum / max(count, 1), "val/accuracy": accuracy_sum / max(count, 1)}
