"""`mfsdp train grpo` configuration: the shared sections plus GRPO's own, verl's names.

Batch sizes follow verl: `data.train_batch_size` and `actor.ppo_mini_batch_size` count
prompts (all ranks together), each rolled out `rollout.n` times; micro-batch sizes count
responses per rank.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.storage.output_path import collapse_dot_dot
from trainer.config import (
    Betas,
    Checked,
    ConfigError,
    LocalPath,
    NonNegative,
    OptimConfig,
    Positive,
    Precision,
    Range,
    RunConfig,
    Scheduler,
    TrainerConfig,
    UnitPositive,
    ValFiles,
)
from trainer.grpo.aggregation import LossAggMode, LossNormalization
from trainer.grpo.kl import KlLossType
from trainer.rollout.vllm_limits import vllm_temperature_refusal

AboveOne = Annotated[float, Range("> 1", lambda v: v > 1)]
# the ratio is clipped to [1 - low, 1 + high]: at low >= 1 the lower bound is 0 or below, under
# every ratio, so the clip that keeps the policy near the old one is off for ratios below 1
ClipLow = Annotated[
    float,
    Range("in [0, 1) (the ratio's lower clip bound is 1 - clip_ratio_low)", lambda v: 0 <= v < 1),
]
# 0 is off as -1 is: vLLM's "0 (disable)", verl's key (`verl_rules._top_k`), the hf engine
TopK = Annotated[int, Range("-1 or 0 (off) or >= 1", lambda v: v >= -1)]
# 0 (verl's greedy) cannot train: the log-probs are taken under softmax(logits / temperature),
# and n greedy responses to a prompt are one response, so every advantage would be 0.
RolloutTemperature = Annotated[
    float,
    Range(
        "> 0 (0 is greedy decoding, which GRPO cannot train on: its log-probs divide by the "
        "temperature and its rollout.n responses are all the same; use a small temperature "
        "such as 0.1 for nearly greedy sampling)",
        lambda v: v > 0,
    ),
]


@dataclass
class RLDataConfig:
    """verl-format RL parquet/jsonl: `prompt` (chat turns), `data_source`,
    `reward_model.ground_truth`."""

    train_files: list[LocalPath] = field(default_factory=list)
    val_files: ValFiles = field(default_factory=list)
    prompt_key: str = "prompt"
    max_prompt_length: Positive[int] = 512
    filter_overlong_prompts: bool = True  # False: a prompt over max_prompt_length is an error
    train_batch_size: Positive[int] = 32  # prompts per step, all ranks
    val_max_samples: Positive[int] | None = None  # validate on the first N val prompts
    shuffle: bool = True
    # True: a prompt's `<image>` / `<video>` trains as literal text (a row without media
    # holding one is refused otherwise: verl expands them into media; unsupported_rows.py)
    placeholders_as_text: bool = False


@dataclass
class ActorConfig:
    ppo_mini_batch_size: Positive[int] = 16  # prompts per optimizer step, all ranks
    ppo_micro_batch_size_per_gpu: Positive[int] = 2  # responses per forward/backward
    log_prob_micro_batch_size_per_gpu: Positive[int] = 8  # responses per no-grad log-prob forward
    ppo_epochs: Positive[int] = 1
    clip_ratio_low: ClipLow = 0.2
    clip_ratio_high: NonNegative[float] = 0.2
    clip_ratio_c: AboveOne = 3.0  # dual-clip bound for negative advantages
    loss_agg_mode: LossAggMode = "token-mean"
    # `global`: each mode over the whole mini-batch, all ranks (verl's engine workers);
    # `micro_batch`: each micro-batch's own, averaged (verl's legacy workers): aggregation.py
    loss_normalization: LossNormalization = "global"
    use_kl_loss: bool = True
    kl_loss_coef: NonNegative[float] = 0.001
    kl_loss_type: KlLossType = "low_var_kl"  # kl.py; a `+` form: k2's gradient (verl's)
    entropy_coeff: float = 0.0


@dataclass
class AlgorithmConfig:
    adv_estimator: Literal["grpo"] = "grpo"
    norm_adv_by_std_in_grpo: bool = True
    epsilon: Positive[float] = 1e-6


@dataclass
class RolloutConfig:
    """`auto`: vllm when it is installed, else hf. Validation is greedy with one sample."""

    name: Literal["auto", "vllm", "hf"] = "auto"
    n: Positive[int] = 5
    temperature: RolloutTemperature = 1.0
    top_p: UnitPositive = 1.0
    top_k: TopK = -1
    max_response_length: Positive[int] = 512
    dtype: Precision = "auto"
    gpu_memory_utilization: UnitPositive = 0.5  # vllm
    enforce_eager: bool = False  # vllm: no CUDA graphs
    cuda_graphs: bool = True  # hf: capture the decode step on CUDA
    fused_ops: bool = (
        True  # hf: torch.compile-fuse the captured step's norms, rotary, SiLU, softmax
    )
    max_num_seqs: Positive[int] = 1024  # hf: sequences decoded together

    def __post_init__(self) -> None:
        # refused here, not by vLLM at the first step after the models are built; `auto`
        # picks vLLM by what the machine has, checked before a run loads anything
        # (`trainer.rollout.vllm_limits`)
        if self.name == "vllm":
            refusal = vllm_temperature_refusal(self.temperature, "rollout.name=vllm")
            if refusal is not None:
                raise ConfigError(refusal)


def _not_keywords(kwargs: dict[Any, Any], key: str) -> str | None:
    """Why `kwargs` cannot be passed as keyword arguments (a key that is no text: a call with
    it fails at every row), or None."""
    named = [name for name in kwargs if not isinstance(name, str)]
    if not named:
        return None
    return (
        f"config key '{key}' has the {type(named[0]).__name__} key {cut_to(repr(named[0]), 40)}:"
        " its keys"
        " name the reward function's keyword arguments, so each is text"
    )


@dataclass
class RewardConfig:
    """Built-in rules by data_source, or `compute_score(data_source, solution_str, ground_truth,
    extra_info)` from your own file."""

    path: LocalPath | None = None
    name: str = "compute_score"
    # keyword arguments given to every call of the function of `path` besides the four,
    # over them where a name is the same (verl's custom_reward_function.reward_kwargs)
    kwargs: Annotated[dict[str, Any], Checked(_not_keywords)] = field(default_factory=dict)
    # seconds one call of the custom function may take before the run stops naming the row
    # (one that never returned hung every rank); 0: no limit
    timeout_s: NonNegative[float] = 60.0


@dataclass
class GRPOTrainerConfig(TrainerConfig):
    run_dir: LocalPath = "runs/grpo"
    val_before_train: bool = False
    # validate after the last step too, whatever `eval_every`; verl's main_ppo does so only
    # with trainer.test_freq > 0 (`mfsdp config from-verl` writes false for its -1)
    val_after_last_step: bool = True
    # verl's: DIR/<step>.jsonl of each step's samples (prompt, response, ground truth, score,
    # advantage), of each validation's (trainer/grpo/generations.py); None: not written
    rollout_data_dir: LocalPath | None = None
    validation_data_dir: LocalPath | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        # written to as run_dir is, so read as it is: `DIR/new/..` names DIR (`output_path`)
        if self.rollout_data_dir is not None:
            self.rollout_data_dir = collapse_dot_dot(self.rollout_data_dir)
        if self.validation_data_dir is not None:
            self.validation_data_dir = collapse_dot_dot(self.validation_data_dir)


@dataclass
class ActorOptimConfig(OptimConfig):
    """verl's actor defaults: lr 1e-6, constant schedule, betas (0.9, 0.999), clip 1.0."""

    lr: NonNegative[float] = 1e-6
    betas: Betas = field(default_factory=lambda: [0.9, 0.999])
    scheduler: Scheduler = "constant"


@dataclass
class GRPOConfig(RunConfig):
    optim: ActorOptimConfig = field(default_factory=ActorOptimConfig)
    trainer: GRPOTrainerConfig = field(default_factory=GRPOTrainerConfig)
    data: RLDataConfig = field(default_factory=RLDataConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)


def note_validation_unread(cfg: GRPOConfig) -> None:
    """One note where the config asks for validation (`trainer.val_before_train`, or
    `trainer.eval_every` above 0, verl's `test_freq`) but gives no `data.val_files`, the
    only validation data GRPO reads: nothing is validated, which passed without a word."""
    if cfg.data.val_files:
        return
    asked = [
        *(["trainer.val_before_train=true"] if cfg.trainer.val_before_train else []),
        *([f"trainer.eval_every={cfg.trainer.eval_every}"] if cfg.trainer.eval_every > 0 else []),
    ]
    if asked:
        logging.getLogger("mfsdp.config").warning(
            "note: %s without data.val_files: nothing is validated; give data.val_files",
            " and ".join(asked),
        )
