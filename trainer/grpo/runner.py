"""The GRPO runner: prompts -> rollouts -> rewards -> group advantages -> PPO updates -> weight
push.

Per step, on every data-parallel rank for its share of the step's prompts: roll out n
responses per prompt with the rollout engine; score them; group advantages; recompute the
old log-probs with the actor and the reference log-probs with the frozen reference (sharded
like the actor); update the actor over mini-batches and micro-batches (`ppo_epochs` passes);
push the new weights into the engine. A prompt's n responses stay on one rank, so groups
never span ranks; losses are normalized by global counts (`aggregation`).

Everything random is a function of (seed, step, rank): which prompts a step takes
(`trainer.data.batching.global_batch`), the rollout's sampling seed, the mini-batch shuffle,
the dropout masks (the global generators, seeded at each step by `trainer.runner`).
So resume needs only the step, the weights and the optimizer, and a resumed run computes what
an uninterrupted run computes. The reference model is rebuilt from the initial weights
(`model.path`, or the shape and seed), recorded in every checkpoint's manifest with its weight
files, which a resume checks (`trainer.grpo.reference`).

With LoRA (`model.lora_rank > 0`) the base model is frozen, so the reference policy is the
actor with its adapter switched off (`trainer.lora.adapters_disabled`): no second model is
built. The engine gets the merged weights (W + scale * B @ A) under the base model's names;
after the first push, only the modules next to an adapter (`iter_merged_weights`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from trainer.closing import close_all
from trainer.config import ConfigError
from trainer.data.batching import global_batch, rank_share
from trainer.distributed import DistEnv, all_reduce_max, all_reduce_sum
from trainer.grpo.actor import (
    RolloutData,
    UpdateStats,
    attach_logprob_forward,
    compute_log_probs,
    left_pad,
    micro_batch_loss,
)
from trainer.grpo.advantage import grpo_token_advantages
from trainer.grpo.aggregation import LossScale
from trainer.grpo.batch_sizes import check_grpo_batches
from trainer.grpo.config import GRPOConfig
from trainer.grpo.data import RLPrompt, load_rl_prompts
from trainer.grpo.generations import dump_generations, generation_rows, response_advantages
from trainer.grpo.reference import INFO_KEY as REFERENCE_INFO_KEY
from trainer.grpo.reference import ReferenceRecord
from trainer.grpo.reward_rules import manifest_info as reward_rules_info
from trainer.grpo.reward_rules import warn_of_rule_changes
from trainer.grpo.weights import iter_full_weights, iter_merged_weights
from trainer.lora import adapters_disabled, is_lora_model, lora_enabled, lora_scales
from trainer.machines_read import check_splits_read_alike
from trainer.metrics import MetricsLogger
from trainer.model import (
    build_hf_config,
    build_model,
    load_tokenizer,
    padding_id,
    write_hf_assets,
)
from trainer.progress import draws_bars
from trainer.resume import RunKind
from trainer.rewards.custom import RewardFunctionError
from trainer.rewards.dispatch import RewardScorer, Scores
from trainer.rollout.base import RolloutEngine, SamplingParams
from trainer.rollout.build import build_rollout_engine, engine_name
from trainer.rollout.finite_logprobs import check_finite_logprobs
from trainer.run_dir_links import ROLLOUT_ASSETS_DIR
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

# a prompt over data.max_prompt_length tokens is dropped: that key decides the rows too
GRPO_RUN = RunKind("grpo", "data.train_batch_size", ("data.train_files", "data.max_prompt_length"))


@dataclass
class GRPOResult(RunResult):
    rewards: dict[int, float] = field(default_factory=dict)  # step -> mean train reward
    val_accuracy: dict[int, float] = field(default_factory=dict)


@dataclass
class GRPOSteps(StepHooks):
    """What a GRPO step needs besides the shared `TrainingRun`, and the GRPO step itself: the
    hooks `TrainingRun.loop` calls."""

    run: TrainingRun
    strategy: Strategy
    actor: torch.nn.Module
    optimizer: torch.optim.Optimizer
    reference: torch.nn.Module | None
    engine: RolloutEngine
    scorer: RewardScorer
    tokenizer: Any
    pad_id: int
    train: Sequence[RLPrompt]
    val: Sequence[RLPrompt]
    rollout_name: str  # the engine that runs, recorded in every manifest
    reference_record: ReferenceRecord  # recorded in every manifest: how to rebuild the reference
    result: GRPOResult
    engine_has_base: bool = False  # set by the first weight push

    def logs_before_first_step(self) -> bool:
        return bool(self.val) and self.cfg.trainer.val_before_train

    def before_first_step(self, metrics: MetricsLogger) -> None:
        # at whatever step the run starts, as verl's `fit` validates after loading a checkpoint
        if self.logs_before_first_step():
            metrics.log(self.run.start, self.validate(self.run.start))

    def after_step(self, done: int, record: dict[str, Any], metrics: MetricsLogger) -> None:
        cfg, run = self.cfg, self.run
        self.result.rewards[done] = record["reward/mean"]
        # validated before it is saved, the last step too: a final validation that failed
        # after the save left a finished run, whose rerun had nothing left to do and exited
        # 0 without ever validating; now the rerun trains that step again and validates it
        last = done == run.stop and cfg.trainer.val_after_last_step
        if self.val and (run.is_due(cfg.trainer.eval_every, done) or last):
            record.update(self._validate_step(done))
            self.result.val_accuracy[done] = record["val/accuracy"]
        if run.is_due(cfg.checkpoint.save_every, done) or done == run.stop:
            timing: dict[str, float] = {}
            with _timed(timing, "timing/checkpoint_s", self.env.device):
                run.save(
                    done,
                    info={
                        REFERENCE_INFO_KEY: self.reference_record.manifest_info(),
                        "total_steps": run.total_steps,
                        "reward_mean": record.get("reward/mean"),
                        "rollout": self.rollout_name,
                        **reward_rules_info(self.scorer.custom),
                    },
                )
            record.update(timing)
        if run.should_log(done, record):
            metrics.log(done, record)

    def bar_postfix(self, record: dict[str, Any]) -> dict[str, str]:
        shown = {
            "reward": f"{record['reward/mean']:.3f}",
            "len": f"{record['response/length_mean']:.0f}",
        }
        if "actor/kl_loss" in record:  # computed with actor.use_kl_loss only: never a 0 shown
            shown["kl"] = f"{record['actor/kl_loss']:.4f}"
        shown["tok/s"] = f"{record['perf/tokens_per_s']:.0f}"
        if "val/accuracy" in record:
            shown["val"] = f"{record['val/accuracy']:.3f}"
        return shown

    def after_last_step(self, metrics: MetricsLogger) -> None:
        """Nothing left: `after_step` validated the last step before saving it."""

    def _validate_step(self, done: int) -> dict[str, float]:
        """`validate` after step `done`; a reward that fails there says so, and that the step
        is not saved (the line named only the row, which the train split may hold too)."""
        try:
            return self.validate(done)
        except RewardFunctionError as err:
            which = "the final" if done == self.run.stop else "the"
            err.args = (  # the same error, its fields kept
                f"{which} validation after step {done} failed, so step {done} is not saved"
                f" (the same command trains it again, then validates): {err}",
            )
            raise

    def close(self) -> None:
        self.engine.close()

    def _score(self, prompts: Sequence[RLPrompt], prompt_index: list[int], texts: list[str]):
        rows = [prompts[i] for i in prompt_index]
        return self.scorer(
            [r.data_source for r in rows],
            texts,
            [r.ground_truth for r in rows],
            [r.extra_info for r in rows],
        )

    def _dump(
        self,
        directory: str,
        step: int,
        prompts: Sequence[RLPrompt],
        prompt_index: list[int],
        texts: list[str],
        scores: Scores,
        advantages: list[float] | None = None,
    ) -> None:
        """verl's generations file of `step` in `directory` (trainer/grpo/generations.py): a
        collective, every rank calls it."""
        rows = [prompts[i] for i in prompt_index]
        inputs = self.tokenizer.batch_decode([r.prompt_ids for r in rows], skip_special_tokens=True)
        truths = [r.ground_truth for r in rows]
        lines = generation_rows(
            step, inputs, texts, truths, scores.rewards, scores.accuracy, advantages
        )
        dump_generations(directory, step, lines)

    def train_step(self, step: int) -> dict[str, Any]:
        """One GRPO step, its phases in verl's order (rollout, reward, group advantages, old
        and reference log-probs, update, weight push), each timed (`timing/*_s`); the step's
        sums are reduced over ranks in one collective at its end. Its prompts and sampling
        seed are functions of (seed, step, rank) alone (`_step_seed`), so a resumed run draws
        what an uninterrupted one drew."""
        cfg, env = self.cfg, self.env
        times: dict[str, float] = {}
        started = time.perf_counter()
        batch_rows = global_batch(
            len(self.train), cfg.data.train_batch_size, step, cfg.trainer.seed, cfg.data.shuffle
        )
        rows = rank_share(batch_rows, env.rank, env.world_size)
        prompts = [self.train[i] for i in rows]
        params = SamplingParams(
            n=cfg.rollout.n,
            temperature=cfg.rollout.temperature,
            top_p=cfg.rollout.top_p,
            top_k=cfg.rollout.top_k,
            max_tokens=cfg.rollout.max_response_length,
            seed=_step_seed(cfg.trainer.seed, step, env.rank, _RANK_SLOTS),
            # the engines' log-probs are the raw model's (trainer/rollout/base.py), the actor's
            # are under the temperature: they are the same quantity only at 1
            logprobs=cfg.rollout.temperature == 1.0,
        )
        with _timed(times, "timing/rollout_s", env.device):
            batch = self.engine.generate([p.prompt_ids for p in prompts], params)
        check_finite_logprobs(batch, step + 1, self.engine.name)  # before scoring or training
        responses = batch.token_lists()
        with _timed(times, "timing/reward_s", env.device):
            texts = self.tokenizer.batch_decode(responses, skip_special_tokens=True)
            scores = self._score(prompts, batch.prompt_index, texts)
        rewards = torch.tensor(scores.rewards, dtype=torch.float32)
        prompt_ids, prompt_mask = left_pad(
            [prompts[i].prompt_ids for i in batch.prompt_index], self.pad_id
        )
        data = RolloutData(prompt_ids, prompt_mask, batch.response_ids, batch.response_mask)
        data.advantages = grpo_token_advantages(
            rewards,
            data.response_mask,
            batch.prompt_index,
            cfg.algorithm.epsilon,
            cfg.algorithm.norm_adv_by_std_in_grpo,
        )
        if not bool(torch.isfinite(data.advantages).all()):  # only unnormalised, near 3e38
            raise RewardFunctionError(
                f"step {step + 1}: rewards from {min(scores.rewards):g} to"
                f" {max(scores.rewards):g} give advantages past float32's range (reward minus"
                " its group's mean, unnormalised); scale the reward down"
            )
        micro, temperature = cfg.actor.log_prob_micro_batch_size_per_gpu, cfg.rollout.temperature
        with _timed(times, "timing/old_log_prob_s", env.device):
            data.old_log_probs = compute_log_probs(self.actor, data, micro, temperature, env.device)
        mismatch = 0.0
        if batch.logprobs is not None:  # engine and actor score the same tokens, same weights
            gap = (batch.logprobs - data.old_log_probs).abs() * data.response_mask
            mismatch = float(gap.sum())
        if cfg.actor.use_kl_loss:
            with _timed(times, "timing/ref_log_prob_s", env.device):
                data.ref_log_probs = self.reference_log_probs(data, micro, temperature)
        with _timed(times, "timing/update_s", env.device):
            update = self.update_policy(data, step)
        if cfg.trainer.rollout_data_dir is not None:
            self._dump(
                cfg.trainer.rollout_data_dir,
                step + 1,
                prompts,
                batch.prompt_index,
                texts,
                scores,
                response_advantages(data.advantages, data.response_mask),
            )
        with _timed(times, "timing/weight_push_s", env.device):
            push_weights(self)
        lengths = data.response_mask.sum(1).float()
        response_tokens, prompt_tokens = float(lengths.sum()), float(prompt_mask.sum())
        truncated = float((lengths >= cfg.rollout.max_response_length).sum())
        (reward_sum, reward_sq, accuracy_sum, count, truncated, tokens, prompt_total, mismatch) = (
            all_reduce_sum(
                [
                    float(rewards.sum()),
                    float((rewards**2).sum()),
                    sum(scores.accuracy),
                    len(responses),
                    truncated,
                    response_tokens,
                    prompt_tokens,
                    mismatch,
                ],
                env.device,
            )
        )
        length_max = all_reduce_max(float(lengths.max()), env.device)
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
            # mean |log p_engine - log p_actor| per response token: 0 up to precision when the
            # weight push works
            "rollout/actor_logprob_diff": (
                mismatch / max(tokens, 1.0) if batch.logprobs is not None else None
            ),
            "timing/step_s": seconds,
            "perf/tokens_per_s": (tokens + prompt_total) / seconds,
            "perf/rollout_tokens_per_s": (
                tokens / max(times["timing/rollout_s"], 1e-9) / env.world_size
            ),
        }
        return record

    def reference_log_probs(
        self, data: RolloutData, micro: int, temperature: float
    ) -> torch.Tensor:
        """The reference model's log-probs; with LoRA, the actor's own with the adapter off."""
        if self.reference is not None:
            return compute_log_probs(self.reference, data, micro, temperature, self.env.device)
        with adapters_disabled(self.actor):
            return compute_log_probs(self.actor, data, micro, temperature, self.env.device)

    def update_policy(self, data: RolloutData, step: int) -> dict[str, float]:
        """`ppo_epochs` passes over this rank's rollouts in shuffled mini-batches, one optimizer
        step each."""
        cfg, env = self.cfg, self.env
        actor_cfg = cfg.actor
        per_rank_mini = actor_cfg.ppo_mini_batch_size // env.world_size * cfg.rollout.n
        lr = self.run.lr(step)
        totals, grad_norms, updates = UpdateStats(), [], 0
        self.actor.train()
        for epoch in range(actor_cfg.ppo_epochs):
            seed = _step_seed(cfg.trainer.seed, step, epoch, _EPOCH_SLOTS)
            shuffle = torch.Generator().manual_seed(seed)
            order = torch.randperm(data.rows, generator=shuffle)
            for start in range(0, data.rows, per_rank_mini):
                mini = order[start : start + per_rank_mini]
                micro = actor_cfg.ppo_micro_batch_size_per_gpu
                micro_batches = [mini[i : i + micro] for i in range(0, len(mini), micro)]
                scale = LossScale.of(
                    [data.response_mask[m].to(env.device) for m in micro_batches],
                    norm_length=cfg.rollout.max_response_length,
                    per_micro_batch=actor_cfg.loss_normalization == "micro_batch",
                )
                stats = UpdateStats()
                for rows in micro_batches:
                    loss = micro_batch_loss(
                        self.actor,
                        data,
                        rows,
                        actor_cfg,
                        scale,
                        cfg.rollout.temperature,
                        env.device,
                        stats,
                    )
                    loss.backward()
                grad_norm = optimizer_update(
                    self.run, self.strategy, self.actor, self.optimizer, step
                )
                grad_norms.append(grad_norm)
                reduced = all_reduce_sum([getattr(stats, k) for k in vars(stats)], env.device)
                for key, value in zip(vars(stats), reduced):
                    setattr(totals, key, getattr(totals, key) + value / scale.dp_size)
                updates += 1
        record = {f"actor/{key}": value / updates for key, value in vars(totals).items()}
        if not actor_cfg.use_kl_loss:
            record.pop("actor/kl_loss")
        record.update(
            {
                "actor/grad_norm": sum(grad_norms) / len(grad_norms),
                "actor/lr": lr,
                "actor/updates": updates,
            }
        )
        return record

    @torch.no_grad()
    def validate(self, done: int) -> dict[str, float]:
        """Greedy, one response per validation prompt; mean reward and accuracy over all of
        them. `done`: the steps trained before it, which names its generations file."""
        cfg, env = self.cfg, self.env
        rows = rank_share(list(range(len(self.val))), env.rank, env.world_size)
        prompts = [self.val[i] for i in rows]
        reward_sum = accuracy_sum = 0.0
        index: list[int] = []
        texts: list[str] = []
        scores = Scores(rewards=[], accuracy=[])
        if prompts:
            greedy = SamplingParams(temperature=0, max_tokens=cfg.rollout.max_response_length)
            batch = self.engine.generate([p.prompt_ids for p in prompts], greedy)
            index = batch.prompt_index
            texts = self.tokenizer.batch_decode(batch.token_lists(), skip_special_tokens=True)
            scores = self._score(prompts, index, texts)
            reward_sum, accuracy_sum = sum(scores.rewards), sum(scores.accuracy)
        if cfg.trainer.validation_data_dir is not None:
            self._dump(cfg.trainer.validation_data_dir, done, prompts, index, texts, scores)
        reward_sum, accuracy_sum, count = all_reduce_sum(
            [reward_sum, accuracy_sum, len(prompts)], env.device
        )
        return {
            "val/reward": reward_sum / max(count, 1),
            "val/accuracy": accuracy_sum / max(count, 1),
        }


def push_weights(steps: GRPOSteps) -> None:
    """Gather the actor's weights (collective) and load them into this rank's rollout engine
    (a module function, so a test can stop the push and watch the policy stop improving).
    A LoRA actor sends merged weights, and after the first push only what an update changes."""
    if is_lora_model(steps.actor):
        state = steps.strategy.weights_state(steps.actor)
        scales = lora_scales(steps.actor)
        weights = iter_merged_weights(state, scales, adapted_only=steps.engine_has_base)
    else:
        weights = iter_full_weights(steps.strategy.model_state(steps.actor).state_dict())
    steps.engine.update_weights(weights)
    steps.engine_has_base = True


def run_grpo(cfg: GRPOConfig) -> GRPOResult:
    """Run this process's rank of a GRPO run: it joins torchrun's group when RANK and
    WORLD_SIZE are set, else it trains alone as a one-rank group, destroyed when it returns
    or fails. `cfg` is meant to come from `cli.launch.load_checked_config`: the run-dir,
    local-path and model-file checks happen there (before torch loads), not here."""
    return run_in_process_group("grpo", cfg, _run)


# Seeds per step (`_step_seed`): one per rank for rollout sampling, one per PPO epoch for
# the mini-batch shuffle; past these counts a seed repeats one of the next step's.
_RANK_SLOTS, _EPOCH_SLOTS = 4096, 64


def _step_seed(seed: int, step: int, slot: int, slots: int) -> int:
    """The seed of `slot` (a rank, an epoch) at `step` of a run seeded `seed`: the prime
    1,000,003 spaces run seeds further apart than any run has steps, and each step holds
    `slots` seeds. Computed, never drawn from a generator, so a resumed run's step N gets
    the seed an uninterrupted run's step N got."""
    return (seed * 1_000_003 + step) * slots + slot


@contextmanager
def _timed(times: dict[str, float], key: str, device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    yield
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    times[key] = times.get(key, 0.0) + time.perf_counter() - started


@contextmanager
def _closed_on_failure(engine: RolloutEngine) -> Iterator[None]:
    """Close `engine` when the block fails, while the process group still exists: vLLM's
    shutdown tears down the group it joined, and run later, when the engine was collected
    after `run_in_process_group` had destroyed that group, it was a traceback under the
    run's error line. `TrainingRun.loop` closes the engine however the steps end."""
    try:
        yield
    except BaseException as err:
        close_all([engine.close], err)  # a failing shutdown never hides the step's error
        raise


def _build_policy(
    cfg: GRPOConfig, hf_config: Any, strategy: Strategy, env: DistEnv
) -> torch.nn.Module:
    model = build_model(cfg.model, hf_config, env.device, cfg.trainer.seed)
    attach_logprob_forward(model)
    return strategy.wrap(model)


def _rollout_dtype(cfg: GRPOConfig, device: torch.device) -> torch.dtype:
    choice = cfg.rollout.dtype
    if choice == "auto":
        choice = "bf16" if device.type == "cuda" else "fp32"
    return torch.bfloat16 if choice == "bf16" else torch.float32


def _own_values(row: RLPrompt) -> tuple[str, str, str]:
    """A prompt as the rows digest sees it (`rows_digests`): its own values, not the
    templated prompt ids (a template may print the date)."""
    return (row.data_source, repr(row.ground_truth), repr(row.extra_info))


def _run(cfg: GRPOConfig, env: DistEnv) -> GRPOResult:
    """Build everything one rank's GRPO run needs, in the order each piece needs the ones
    before it: the config, the data and the step to resume (`check_resume_target`) are
    checked before any model is built or the engine writes its model dir into the run dir
    (a bad file, batch size or resume fails before minutes of model loading and engine
    start-up), the reference's weights are hashed
    while the models build (`ReferenceRecord.of`), and the engine gets the actor's weights
    (`push_weights`) only after `TrainingRun.open` has resumed them, so its first rollout
    samples from the resumed actor."""
    check_grpo_batches(cfg, env.world_size)  # the launcher's check, for the group joined
    if not cfg.data.train_files:
        raise ConfigError("data.train_files: no training files given")
    run_dir = Path(cfg.trainer.run_dir)
    show = draws_bars(env.is_main and cfg.trainer.progress_bar)
    tokenizer = load_tokenizer(cfg.model)
    hf_config = build_hf_config(cfg.model, tokenizer)
    custom = bool(cfg.reward.path)  # its function may take a structured ground truth
    train, dropped = load_rl_prompts(
        cfg.data.train_files, cfg.data, tokenizer, progress=show, custom_reward=custom
    )
    val: Sequence[RLPrompt] = []
    if cfg.data.val_files:
        val = load_rl_prompts(
            cfg.data.val_files,
            cfg.data,
            tokenizer,
            limit=cfg.data.val_max_samples,
            custom_reward=custom,
        )[0]
    digests = check_splits_read_alike(cfg.model, tokenizer, hf_config, (train, val), _own_values)
    batch_size = cfg.data.train_batch_size
    # before the models, the engine and its files
    total_steps = checked_steps(
        GRPO_RUN, cfg, hf_config, batch_size, len(train), "usable training prompts"
    )
    scorer = RewardScorer(cfg.reward.path, cfg.reward.name, cfg.reward.timeout_s, cfg.reward.kwargs)
    # hashed while the models build; LoRA: the reference is the actor with its adapter off
    # (GRPOSteps.reference_log_probs)
    reference_record = ReferenceRecord.of(cfg, lora=lora_enabled(cfg.model))
    strategy = make_strategy(cfg.strategy, env)
    actor = _build_policy(cfg, hf_config, strategy, env)
    optimizer = strategy.build_optimizer(actor, cfg.optim)
    separate_reference = reference_record.weights is not None
    reference = _build_policy(cfg, hf_config, strategy, env).eval() if separate_reference else None
    max_model_len = cfg.data.max_prompt_length + cfg.rollout.max_response_length
    name = engine_name(cfg.rollout.name)

    def write_assets(target: Path) -> None:
        write_hf_assets(target, hf_config, tokenizer, cfg.model.path)

    engine = build_rollout_engine(
        name,
        hf_config=hf_config,
        tokenizer=tokenizer,
        model_path=cfg.model.path,
        assets_dir=run_dir / ROLLOUT_ASSETS_DIR / f"rank{env.rank}",
        write_assets=write_assets,
        device=env.device,
        dtype=_rollout_dtype(cfg, env.device),
        max_model_len=max_model_len,
        seed=cfg.trainer.seed + env.rank,
        gpu_memory_utilization=cfg.rollout.gpu_memory_utilization,
        enforce_eager=cfg.rollout.enforce_eager,
        cuda_graphs=cfg.rollout.cuda_graphs,
        fused_ops=cfg.rollout.fused_ops,
        max_num_seqs=cfg.rollout.max_num_seqs,
    )
    with _closed_on_failure(engine):  # until the loop, which closes it however it ends
        run = TrainingRun.open(
            GRPO_RUN,
            cfg,
            env,
            strategy=strategy,
            model=actor,
            optimizer=optimizer,
            hf_config=hf_config,
            hf_assets=write_assets,
            batch_size=batch_size,
            train_rows=len(train),
            digests=digests,
            total_steps=total_steps,
            checks=(reference_record.check_manifest,),
        )
        warn_of_rule_changes(run, scorer.custom, (row.data_source for row in (*train, *val)))
        run.announce(
            f"{strategy.name} on {env.world_size} x {env.device.type}, rollout {name}, "
            f"{len(train)} train prompts ({dropped} over data.max_prompt_length dropped), "
            f"{len(val)} val"
        )
        steps = GRPOSteps(
            run=run,
            strategy=strategy,
            actor=actor,
            optimizer=optimizer,
            reference=reference,
            engine=engine,
            scorer=scorer,
            tokenizer=tokenizer,
            pad_id=padding_id(tokenizer),
            train=train,
            val=val,
            rollout_name=name,
            reference_record=reference_record,
            result=GRPOResult(run_dir=run_dir, final_step=0, resumed_from=run.resumed_from),
        )
        push_weights(steps)
    run.loop(steps)
    return run.finish(steps.result)
