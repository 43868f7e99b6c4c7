"""What each verl config key means here: the table the config loader reads verl's keys by.

Each verl key has a Rule: the mfsdp key it sets and how its value is read, or the value(s)
it is accepted at, refused at any other with why (Unsupported), or the note it is dropped
with. Keys verl copies from another are MIRRORS; resume's two keys are read together
(RESUME). A rule reads its key's value alone. Reading a run's keys against the table (the
rules that read another key of the run, typos, YAML trees) is trainer.verl_keys; verl's
optimizer keys on its Megatron backend are trainer.verl_megatron_optim. The table is apart
from both so it reads as one list, beside trainer.verl_off_keys and trainer.verl_inert_keys,
and so both readers import it without importing each other: with it are what they share,
NotCarried, `normalise` (the actor's optimizer section is `optim` here) and `note` (the one
logged line each verl key read gets).

Units follow verl: GRPO's `ppo_mini_batch_size` and `data.train_batch_size` count prompts
(each rolled out `rollout.n` times), micro-batch sizes count responses per GPU, SFT's
`data.train_batch_size` counts sequences over all GPUs, `max_token_len_per_gpu` tokens.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from mfsdp_ckpt.errors import MfsdpUsageError
from trainer.shown_value import typed_text
from trainer.verl_inert_keys import INERT_KEYS, PAD_MODE, PADDING
from trainer.verl_off_keys import HF_MODELS, MEGATRON_LORA_SECTIONS, MODEL, OFF_KEYS, Off

log = logging.getLogger("mfsdp.config")

VERL_ONLY_SECTION = "actor_rollout_ref."  # verl's; mfsdp has no section of that name
# The top-level sections (and keys) of one verl trainer's config alone, by the mfsdp command
# that trains as that trainer: main_ppo's (_generated_ppo_trainer.yaml, its model and
# optimizer under actor_rollout_ref) and the SFT trainer's (sft_trainer.yaml,
# sft_trainer_engine.yaml); both have `data` and `trainer`. A verl key under one is never
# the other command's, whatever mfsdp key its rule sets: the actor's `optim.lr` is
# `optim.lr` here, and still no SFT setting. The SFT trainer's `model`, `optim` and
# `checkpoint` are not listed: both mfsdp commands have sections of those names, where a
# verl name (`optim.lr_warmup_steps_ratio`) is read as the mfsdp key it sets, with a note.
TRAINER_SECTIONS = {
    "grpo": frozenset(
        {
            *("actor_rollout_ref", "critic", "algorithm", "reward_model", "reward"),
            *("reward_manager", "custom_reward_function", "sandbox_fusion", "distillation"),
            *("global_profiler", "transfer_queue", "ray_kwargs", "skip"),
        }
    ),
    "sft": frozenset(
        {
            *("engine", "profiler", "use_remove_padding", "ulysses_sequence_parallel_size"),
        }
    ),
}
ACTOR = "actor_rollout_ref.actor."
REF = "actor_rollout_ref.ref."
ROLLOUT = "actor_rollout_ref.rollout."
PARALLEL_SIZES = (
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "context_parallel_size",
    "expert_model_parallel_size",
    "virtual_pipeline_model_parallel_size",
    "ulysses_sequence_parallel_size",
    "expert_tensor_parallel_size",
    "expert_parallel_size",  # the rollout engine's
)


class Unsupported(MfsdpUsageError, ValueError):
    """A verl key (or value) that mfsdp cannot honour; the message says why."""


class NotCarried(MfsdpUsageError):
    """A verl key that does not carry over: `text` says so naming the key (the message after
    its source), `reason` says why alone, for `mfsdp config from-verl`, which lists the key
    and value itself (read off the message, a value holding ': ' cut the reason short). A
    config mistake like ConfigError, which `adopt_pairs` makes of it with the source."""

    def __init__(self, text: str, reason: str = "") -> None:
        super().__init__(text)
        self.text = text
        self.reason = reason or text


@dataclass(frozen=True)
class Rule:
    """How one verl key becomes mfsdp keys. `target` is the mfsdp key it sets (None: none,
    or several); the value is `read` into it, or `convert` maps the value to {mfsdp key:
    value} ({} drops it, with `why` logged) or raises Unsupported; `commands` limits it to
    sft or grpo. A typo of the verl key is told its name and `target` (`close_names`)."""

    target: str | None
    convert: Callable[[Any], dict[str, Any]] | None = None
    why: str = ""
    commands: tuple[str, ...] = ("sft", "grpo")
    read: Callable[[Any], Any] = lambda value: value

    def apply(self, cls: type, value: Any) -> dict[str, Any]:
        if self.convert is not None:
            return self.convert(value)
        return {self.target: self.read(value)} if self.target else {}


# verl's SFT trainers' value of save_freq / test_freq (sft_trainer.py `_init_engine`): the
# steps of one epoch, its dataloader's length, which only the data says
EACH_EPOCH = "after_each_epoch"


def _freq(key: str) -> Callable[[Any], Any]:
    """verl's save_freq / test_freq read as mfsdp's `key`: -1 (never) is mfsdp's 0
    (periodically never; at the end still). verl's sft_trainer's `after_each_epoch` has no mfsdp
    setting, and the steps it stands for are known only from the data: refused naming what
    to write (read as the integer `key` takes, it was an error about `key`, never written)."""

    def read(value: Any) -> Any:
        if value == EACH_EPOCH:
            raise Unsupported(
                "verl's sft_trainer reads it as the steps of one epoch (its dataloader's"
                f" length), which mfsdp has no setting for: set {key} to the steps of one"
                " epoch, the train rows // data.global_batch_size (verl's main_ppo and"
                " fsdp_sft_trainer take steps only)"
            )
        return 0 if isinstance(value, int) and value < 0 else value

    return read


def _only(allowed: Any, why: str) -> Callable[[Any], dict[str, Any]]:
    """A key accepted only at its harmless value(s) here, dropped then; any other value fails."""
    allowed = allowed if isinstance(allowed, tuple) else (allowed,)

    def convert(value: Any) -> dict[str, Any]:
        if value in allowed:
            return {}
        raise Unsupported(why)

    return convert


# main_ppo validates after its last step only with trainer.test_freq > 0 (ray_trainer.py
# `fit`: `test_freq > 0 and (is_last_step or ...)`); its SFT trainers validate there
# whenever they have validation data, as mfsdp does
TEST_FREQ = "trainer.test_freq"
FINAL_VALIDATION = "trainer.val_after_last_step"


def grpo_final_validation(key: str, value: Any) -> dict[str, Any]:
    """What verl key `key` at `value` sets in GRPO besides its rule's key: a test_freq of 0
    or less (never) leaves out the validation after the last step, which mfsdp's
    eval_every 0 still runs."""
    never = isinstance(value, int) and not isinstance(value, bool) and value <= 0
    return {FINAL_VALIDATION: False} if key == TEST_FREQ and never else {}


WORKER_IMPL = "trainer.use_legacy_worker_impl"
# verl's FSDP backend's cosine schedule falls to min_lr_ratio x lr
# (verl/utils/torch_functional.py get_cosine_schedule_with_warmup: lr x (r + (1 - r) x
# (1 + cos) / 2)), mfsdp's to optim.min_lr (trainer/optim.py lr_at): the same curve at
# min_lr = r x lr; verl's Megatron backend reads optim.min_lr alone
MIN_LR_RATIO = "optim.min_lr_ratio"


def min_lr_of(ratio: Any, lr: Any) -> float | None:
    """optim.min_lr for verl's `ratio` of the run's `lr` (None: either is no number)."""
    numbers = [_number(value) for value in (ratio, lr)]
    if None in numbers:  # an override's text (`mfsdp train optim.lr=2e-6`) reads as its number
        return None
    # the product of the numbers as written (0.1 x 1e-05 is 1e-06, not 1.0000000000000002e-06)
    return float(Decimal(repr(numbers[0])) * Decimal(repr(numbers[1])))


SUM_NORM = "seq-mean-token-sum-norm"
_BY_VERSION = "the config cannot say which verl ran it"
# the refusal reads the command's keys only, not the run it may resume, whose config.yaml
# records the value its steps trained with: the way to keep it is said for every run
_RESUMED = (
    "; to resume a run, give the actor.loss_normalization its RUN_DIR/config.yaml records"
    " (left out, the resumed steps train mfsdp's default, global)"
)


def _worker_normalization(value: Any) -> dict[str, Any]:
    """verl's trainer.use_legacy_worker_impl: which of its actor workers runs, and so how a
    mini-batch's loss is normalized over its micro-batches (trainer/grpo/aggregation.py):
    `auto` and `enable` ran the legacy dp_actor (each micro-batch's own mean), `disable` the
    engine workers (over the whole mini-batch). With seq-mean-token-sum-norm neither holds
    for every verl (`worker_version_refusal`)."""
    if value in ("auto", "enable"):
        return {"actor.loss_normalization": "micro_batch"}
    if value == "disable":
        return {"actor.loss_normalization": "global"}
    raise Unsupported("use_legacy_worker_impl is auto, enable or disable")


def worker_version_refusal(value: Any, loss_agg_mode: Any) -> str | None:
    """Why trainer.use_legacy_worker_impl=`value` does not carry over beside `loss_agg_mode`
    (None: it does). verl's `agg_loss` took seq-mean-token-sum-norm's mean over sequences
    only from b8d91ef8d (2026-02-26) on: the legacy dp_actor (`auto`, `enable`) trained
    `micro_batch` before it and `global` after (until 044bbba27, 2026-04-20, removed it),
    the engine workers (`disable`) summed the whole mini-batch's token sums over L before it,
    which no normalization here trains, and `global` after. A config does not say which verl
    wrote it, and the two differ by the micro-batch's sequence count (16 times at 16 a
    micro-batch): the user picks, the conversion does not."""
    if loss_agg_mode != SUM_NORM or value not in ("auto", "enable", "disable"):
        return None
    mode = f"with loss_agg_mode={SUM_NORM}"
    if value == "disable":
        return (
            f"{mode} verl's engine workers trained by its version: before verl b8d91ef8d"
            " (2026-02-26) the sum of the mini-batch's token sums over L, which no setting here"
            " trains; from b8d91ef8d on their mean over its responses"
            f" (actor.loss_normalization=global); {_BY_VERSION}: give"
            " actor.loss_normalization=global in its place if that verl was b8d91ef8d or later"
            + _RESUMED
        )
    return (
        f"{mode} verl's legacy actor trained by its version: before verl b8d91ef8d (2026-02-26)"
        " the sum of each micro-batch's token sums over L (actor.loss_normalization=micro_batch);"
        " from b8d91ef8d until verl removed the legacy actor (044bbba27, 2026-04-20) their mean"
        " over the micro-batch's responses (actor.loss_normalization=global);"
        f" {_BY_VERSION}: give actor.loss_normalization in its place{_RESUMED}"
    )


def _only_off(off: Off) -> Callable[[Any], dict[str, Any]]:
    """`_only` for a key of verl_off_keys, which compares a list in any order and a flag
    never as a number."""

    def convert(value: Any) -> dict[str, Any]:
        if off.accepts(value):
            return {}
        raise Unsupported(off.refused)

    return convert


def _multiturn(value: Any) -> dict[str, Any]:
    """verl's switch between its SFT datasets: MultiTurnSFTDataset reads the messages
    column, SFTDataset the prompt and response columns."""
    if isinstance(value, bool):
        return {"data.chat_columns": "messages" if value else "prompt_response"}
    raise Unsupported("data.multiturn.enable is true or false")


def _rollout_mode(value: Any) -> dict[str, Any]:
    if value in ("async", "sync"):
        return {}
    raise Unsupported("rollout.mode is async (verl's only mode now) or sync")


def _rollout_dtype(value: Any) -> dict[str, Any]:
    dtypes = {"bfloat16": "bf16", "bf16": "bf16", "float32": "fp32", "fp32": "fp32"}
    if value in dtypes:
        return {"rollout.dtype": dtypes[value]}
    raise Unsupported("rollout.dtype here is bf16 or fp32")


def _top_k(value: Any) -> Any:
    """verl's rollout top_k as mfsdp's: 0 is off, as -1 is (verl's rollout.yaml: "-1 for
    vLLM rollout, 0 for HF rollout"; vLLM takes either for all tokens), mfsdp's -1. Read as
    it stands, verl's HF setting was out of mfsdp's range and the script gave no config."""
    return -1 if value == 0 and not isinstance(value, bool) else value


def _rollout_name(value: Any) -> dict[str, Any]:
    if value in ("vllm", "hf", "auto"):
        return {"rollout.name": value}
    raise Unsupported("rollout engines here are vllm and hf (colocated); sglang is not supported")


def _scheduler(*styles: str, why: str) -> Callable[[Any], dict[str, Any]]:
    """optim.scheduler at the `styles` verl's key takes; any other refused with `why`."""

    def convert(value: Any) -> dict[str, Any]:
        if value in styles:
            return {"optim.scheduler": value}
        raise Unsupported(why)

    return convert


_ANY_SCHEDULER = _scheduler(
    "constant", "cosine", "linear", why="optim.scheduler here is constant, cosine or linear"
)
# verl/workers/config/optimizer.py FSDPOptimizerConfig.__post_init__ asserts both in
# [constant, cosine]: verl does not start at linear
_FSDP_SCHEDULER = _scheduler(
    "constant",
    "cosine",
    why="verl takes constant or cosine here (FSDPOptimizerConfig asserts it) and does not"
    " start at any other",
)


# verl's use_megatron_fsdp=False (its Megatron configs' default) trains with Megatron's own
# data parallel (a distributed optimizer): the same updates as a sharded one
MEGATRON_DATA_PARALLEL = (
    "Megatron's own data parallel trains the same updates; strategy.name picks the sharding here"
)


def _strategy(value: Any) -> dict[str, Any]:
    if value is True:
        return {"strategy.name": "megatron_fsdp"}
    if value is False:
        return {}
    raise Unsupported("use_megatron_fsdp is True (strategy.name=megatron_fsdp) or False")


LORA_KEYS = ("lora_rank", "lora_alpha", "target_modules", "lora_adapter_path")  # same names here
# verl's Megatron backend names LoRA's target modules as Megatron-core does; mfsdp adapts the
# Hugging Face modules they fuse, one adapter each (Megatron-Bridge's canonical_lora)
_MEGATRON_LORA_MODULES = {
    "linear_qkv": ("q_proj", "k_proj", "v_proj"),
    "linear_q": ("q_proj",),
    "linear_k": ("k_proj",),
    "linear_v": ("v_proj",),
    "linear_proj": ("o_proj",),
    "linear_fc1": ("gate_proj", "up_proj"),
    "linear_fc1_gate": ("gate_proj",),
    "linear_fc1_up": ("up_proj",),
    "linear_fc2": ("down_proj",),
}


def _megatron_lora_targets(value: Any) -> dict[str, Any]:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(n in _MEGATRON_LORA_MODULES for n in names):
        raise Unsupported(f"Megatron LoRA target modules here are {sorted(_MEGATRON_LORA_MODULES)}")
    hf = [m for n in names for m in _MEGATRON_LORA_MODULES[n]]
    return {"model.target_modules": list(dict.fromkeys(hf))}


# verl's Megatron `override_transformer_config` keys that change only what is recomputed,
# which kernels run and how MoE tokens travel between ranks (verl's defaults set some:
# verl/models/mcore/config_converter.py turns the fusions on), not the model or its
# updates: Megatron-core's TransformerConfig documents each as a fused kernel, a
# recomputation or a dispatch choice
SPEED_OVERRIDES = (
    "recompute_granularity",
    "recompute_modules",
    "recompute_method",
    "recompute_num_layers",
    "attention_backend",
    # fused kernels of the same computation
    "gradient_accumulation_fusion",
    "apply_rope_fusion",
    "bias_activation_fusion",
    "bias_dropout_fusion",
    "masked_softmax_fusion",
    "persist_layer_norm",
    "cross_entropy_loss_fusion",
    "moe_permute_fusion",
    "moe_router_fusion",
    "moe_grouped_gemm",
    # how MoE tokens reach their experts' ranks
    "moe_token_dispatcher_type",
    "moe_enable_deepep",
    "moe_shared_expert_overlap",
)
SPEED_OVERRIDES_WHY = (
    "recomputation, fused kernels, the attention kernel and MoE token dispatch: speed or memory"
    " only (model.activation_checkpointing here)"
)


def _transformer_overrides(value: Any) -> dict[str, Any]:
    """verl's Megatron transformer overrides, accepted where they set recomputation, kernels
    and MoE dispatch only (`SPEED_OVERRIDES`); one that changes the model or its numerics is
    refused, naming it (a fusion was refused as a model setting, with advice to edit a
    config.json that has no field for it)."""
    others = sorted(set(value) - set(SPEED_OVERRIDES)) if isinstance(value, dict) else []
    if isinstance(value, dict) and not others:
        return {}
    named = f"{', '.join(others)} changes" if others else "a mapping of settings is expected:"
    raise Unsupported(
        f"{named} what the model computes, where the overrides taken here are speed or memory"
        " only (recomputation, fused kernels, the attention kernel, MoE token dispatch); the"
        " model here is its config.json as written (a setting that has a field there is"
        " changed in a copy of the model dir)"
    )


# verl's FSDP backend's LoRA keys, each at verl's default (verl/workers/config/model.py):
# its Megatron backend never reads them, and builds its adapter from model.lora.* alone
# (verl/workers/config/megatron_peft.py); carried over there, `lora_rank=16` trained an
# adapter verl does not build
FSDP_LORA_DEFAULTS = {
    MODEL + "lora_rank": 0,
    MODEL + "lora_alpha": 16,
    MODEL + "target_modules": "all-linear",
    MODEL + "lora_adapter_path": None,
}
FSDP_LORA_ON_MEGATRON = (
    "verl's Megatron backend does not read it: its LoRA is model.lora.* (lora.rank,"
    " lora.alpha, lora.target_modules)"
)

# verl's Megatron LoRA (Megatron-Bridge's): read only when its rank is above 0
LORA_OFF = (
    "LoRA is off (lora.rank 0, verl's default), and verl reads its lora.* settings only when"
    " it is on"
)


_MEGATRON_LORA_RULES = {
    "rank": Rule("model.lora_rank"),
    "alpha": Rule("model.lora_alpha"),
    "target_modules": Rule("model.target_modules", _megatron_lora_targets),
    "lora_A_init_method": Rule(
        None,
        _only("kaiming", "LoRA's A is initialised as PEFT does (kaiming uniform) here"),
        why="kaiming is how A starts here too",
    ),
    "type": Rule(
        None,
        _only(
            "canonical_lora",
            "adapters here are one per Hugging Face module (canonical_lora); Megatron's fused"
            " lora shares one A across q/k/v and gate/up",
        ),
        why="adapters here are one per Hugging Face module",
    ),
}

# verl's prefixes of a module path (verl/utils/import_utils.py load_module): `pkg://a.b.c`
# imports the module, `file://` is dropped and the rest read as a path, relative or absolute
_PKG_PREFIX = "pkg://"
_FILE_PREFIX = "file://"


def _reward_path(value: Any) -> Any:
    """verl's custom_reward_function.path as a path here, read as verl's loader reads it:
    `file://rw/f.py` is the relative path rw/f.py (a URL here, refused as "of the host rw");
    `pkg://` names a module to import, which mfsdp does not: refused naming it (it was "a
    URL; copy it locally first", though there was nothing to copy)."""
    if not isinstance(value, str):
        return value
    if value.startswith(_PKG_PREFIX):
        module = value[len(_PKG_PREFIX) :].replace("/", ".")
        raise Unsupported(
            f"verl's {_PKG_PREFIX} module form is not supported here; give the module's file"
            f""" path (python -c "import {module}; print({module}.__file__)" prints it)"""
        )
    return value.removeprefix(_FILE_PREFIX)


def _reward_kwargs(value: Any) -> dict[str, Any]:
    """verl's reward_kwargs (a mapping) as reward.kwargs, one dotted key per value
    (`reward.kwargs.bonus`), so that several given apart (`+custom_reward_function.
    reward_kwargs.a=1` and `.b=2`, or one in the file and one on the command line) are all
    kept, as Hydra merges them; `{}` sets it empty."""
    if not isinstance(value, dict):
        raise Unsupported("reward_kwargs is a mapping of keyword arguments (reward.kwargs here)")
    return _dotted("reward.kwargs", value)


def _dotted(key: str, value: Any) -> dict[str, Any]:
    """`value` set at `key` as dotted keys, one per value inside its mappings; a mapping
    left whole where a dotted key cannot name its keys (empty, a key with a dot or no text)."""
    named = isinstance(value, dict) and all(isinstance(n, str) and "." not in n for n in value)
    if not value or not named:
        return {key: value}
    return {
        dotted: item
        for name, inner in value.items()
        for dotted, item in _dotted(f"{key}.{name}", inner).items()
    }


# verl's custom_reward_function section, where verl's main_ppo and its newer `reward`
# section (`reward.custom_reward_function`) keep it (verl/trainer/ppo/reward.py)
_CUSTOM_REWARD_RULES = {
    "path": Rule("reward.path", commands=("grpo",), read=_reward_path),
    "name": Rule("reward.name", commands=("grpo",)),
    "reward_kwargs": Rule("reward.kwargs", _reward_kwargs, commands=("grpo",)),
}

LAUNCH = "a launch setting here: pass --nproc-per-node / --nnodes to mfsdp train"
CLIP_RATIO = ACTOR + "clip_ratio"
# verl's actor.yaml sets both sides (not null), so its clip_ratio alone changes nothing
VERL_CLIP_DEFAULT = 0.2
CLIP_SIDES = {
    side: (f"{ACTOR}clip_ratio_{side}", f"actor.clip_ratio_{side}") for side in ("low", "high")
}

# verl's gradient-clip keys, as `normalise` reads them: each sets optim.clip_grad here.
# verl's FSDP actor and optimizer pass the value to torch's clip_grad_norm_ unchecked
# (verl/workers/actor/dp_actor.py `_optimizer_step`, verl/workers/config/optimizer.py), where
# a norm of 0 or less scales every gradient by 0 or less: the run never learns. mfsdp's
# optim.clip_grad=0 means no clipping, and so does Megatron's (its optimizer clips only
# above 0), so a verl run on its Megatron backend carries over as it is.
CLIP_KEYS = ("optim.clip_grad", "optim.grad_clip", ACTOR + "grad_clip")
ZERO_CLIP_WHY = (
    "verl clips to a norm of 0 or less, which zeroes every gradient (torch's"
    " clip_grad_norm_), so its run never learns: leave it out or set a positive norm"
    " (mfsdp's own optim.clip_grad=0 means no clipping)"
)
WEIGHT_DECAY = "optim.weight_decay"
# trainer.optim.param_groups decays weight matrices only, as verl's Megatron backend
# (Megatron-core) does; verl's FSDP backend hands every parameter to AdamW with one decay
DECAY_SCOPE = (
    "on weight matrices only here (biases and norm weights get none); verl's FSDP backend"
    " decays every parameter"
)


def clips_to_zero(key: str, value: Any) -> bool:
    """Whether verl key `key` (read as `normalise` reads it) at `value` is a gradient clip
    verl's FSDP backend trains with no gradient at (ZERO_CLIP_WHY)."""
    number = _number(value)
    return key in CLIP_KEYS and number is not None and number <= 0


def decays(value: Any) -> bool:
    """Whether a weight decay `value` decays anything (DECAY_SCOPE applies)."""
    number = _number(value)
    return number is not None and number != 0


def _number(value: Any) -> float | None:
    """`value` as a number (text as a number reads too), else None; a flag is no number."""
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


# verl key -> rule. Optimizer keys are listed once under `optim.` (SFT's section) and also
# reached from the actor's `actor_rollout_ref.actor.optim.` (see `normalise`).
RULES: dict[str, Rule] = {
    # optimizer (verl's optim/fsdp.yaml and optim/megatron.yaml names)
    "optim.lr_warmup_steps_ratio": Rule("optim.warmup_ratio"),
    "optim.warmup_steps_ratio": Rule("optim.warmup_ratio"),
    "optim.lr_scheduler": Rule("optim.scheduler", _ANY_SCHEDULER),
    # read with the run's optim.lr and backend (`verl_keys._min_lr_ratio`)
    MIN_LR_RATIO: Rule("optim.min_lr"),
    "optim.lr_warmup_steps": Rule(
        "optim.warmup_steps", read=lambda v: max(0, v) if isinstance(v, int) else v
    ),
    "optim.lr_decay_style": Rule("optim.scheduler", _ANY_SCHEDULER),
    "optim.warmup_style": Rule("optim.scheduler", _FSDP_SCHEDULER),
    "optim.lr_scheduler_type": Rule("optim.scheduler", _FSDP_SCHEDULER),
    "optim.total_training_steps": Rule(
        None,
        _only((-1, None), "set trainer.total_steps instead"),
        why="verl fills it from trainer.total_training_steps",
    ),
    "optim.optimizer": Rule(
        None,
        _only(("AdamW", "adam"), "the optimizer here is AdamW"),
        why="the optimizer here is AdamW",
    ),
    "optim.grad_clip": Rule("optim.clip_grad"),
    ACTOR + "grad_clip": Rule("optim.clip_grad", commands=("grpo",)),
    # actor (GRPO)
    **{
        ACTOR + name: Rule(f"actor.{name}", commands=("grpo",))
        for name in (
            "ppo_mini_batch_size",
            "ppo_micro_batch_size_per_gpu",
            "ppo_epochs",
            "clip_ratio_low",
            "clip_ratio_high",
            "clip_ratio_c",
            "loss_agg_mode",
            "use_kl_loss",
            "kl_loss_coef",
            "kl_loss_type",
            "entropy_coeff",
        )
    },
    # read with loss_agg_mode too (`worker_version_refusal`)
    WORKER_IMPL: Rule("actor.loss_normalization", _worker_normalization, commands=("grpo",)),
    # read with clip_ratio_low and clip_ratio_high, whatever their order (`_clip_ratio`)
    CLIP_RATIO: Rule(None, commands=("grpo",)),
    ACTOR + "use_dynamic_bsz": Rule(
        None,
        _only(
            False,
            "dynamic (token-budget) batches are not supported yet in GRPO; "
            "micro-batches count responses",
        ),
        why="fixed micro-batches are the only kind in GRPO",
        commands=("grpo",),
    ),
    ACTOR + "ppo_max_token_len_per_gpu": Rule(
        None, why="used only with use_dynamic_bsz", commands=("grpo",)
    ),
    ACTOR + "megatron.use_megatron_fsdp": Rule(
        "strategy.name", _strategy, why=MEGATRON_DATA_PARALLEL, commands=("grpo",)
    ),
    # SFT on verl's Megatron engine (engine/megatron.yaml)
    "engine.use_megatron_fsdp": Rule(
        "strategy.name", _strategy, why=MEGATRON_DATA_PARALLEL, commands=("sft",)
    ),
    "engine.override_transformer_config": Rule(
        None, _transformer_overrides, why=SPEED_OVERRIDES_WHY, commands=("sft",)
    ),
    **{
        role + "megatron.override_transformer_config": Rule(
            None, _transformer_overrides, why=SPEED_OVERRIDES_WHY, commands=("grpo",)
        )
        for role in (ACTOR, REF)
    },
    "actor_rollout_ref.ref.megatron.use_megatron_fsdp": Rule(
        None, why="the reference model uses the actor's strategy", commands=("grpo",)
    ),
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": Rule(
        "actor.log_prob_micro_batch_size_per_gpu", commands=("grpo",)
    ),
    ROLLOUT + "log_prob_micro_batch_size_per_gpu": Rule(
        "actor.log_prob_micro_batch_size_per_gpu", commands=("grpo",)
    ),
    ROLLOUT + "log_prob_use_dynamic_bsz": Rule(
        None,
        _only(False, "dynamic log-prob batches are not supported yet"),
        why="fixed log-prob micro-batches are the only kind",
        commands=("grpo",),
    ),
    "actor_rollout_ref.ref.log_prob_use_dynamic_bsz": Rule(
        None,
        _only(False, "dynamic log-prob batches are not supported yet"),
        why="fixed log-prob micro-batches are the only kind",
        commands=("grpo",),
    ),
    "actor_rollout_ref.hybrid_engine": Rule(
        None,
        _only(True, "the rollout here is always colocated with the actor"),
        why="the rollout is always colocated with the actor",
        commands=("grpo",),
    ),
    # rollout (GRPO)
    **{
        ROLLOUT + name: Rule(f"rollout.{name}", commands=("grpo",))
        for name in (
            "n",
            "temperature",
            "top_p",
            "gpu_memory_utilization",
            "enforce_eager",
        )
    },
    ROLLOUT + "top_k": Rule("rollout.top_k", read=_top_k, commands=("grpo",)),
    ROLLOUT + "name": Rule("rollout.name", _rollout_name, commands=("grpo",)),
    # verl's server-mode engines driven by its agent loop (async, now its only mode) and its
    # removed sync mode both roll out the policy of the last update; so does the engine here,
    # in-process between updates. Multi-turn, tools and agent loops have keys of their own.
    ROLLOUT + "mode": Rule(
        None,
        _rollout_mode,
        why="the engine here rolls out in-process between updates (on-policy), as both of"
        " verl's modes do for single-turn GRPO",
        commands=("grpo",),
    ),
    ROLLOUT + "dtype": Rule("rollout.dtype", _rollout_dtype, commands=("grpo",)),
    **{
        ROLLOUT + name: Rule(
            None,
            why="how verl moves weights into its engine; the engine here gets the actor's"
            " weights before each rollout",
            commands=("grpo",),
        )
        for name in ("load_format", "layered_summon")
    },
    ROLLOUT + "max_model_len": Rule(
        None,
        why="the engine sizes it from max_prompt_length + max_response_length"
        " (a value below their sum is refused)",
        commands=("grpo",),
    ),
    "data.max_response_length": Rule("rollout.max_response_length", commands=("grpo",)),
    # model
    "actor_rollout_ref.model.path": Rule("model.path"),
    **{
        model + "tokenizer_path": Rule("model.tokenizer", commands=commands)
        for model, commands in HF_MODELS
    },
    "actor_rollout_ref.model.enable_gradient_checkpointing": Rule("model.activation_checkpointing"),
    "model.enable_gradient_checkpointing": Rule("model.activation_checkpointing"),
    "model.partial_pretrain": Rule("model.path"),
    "actor_rollout_ref.model.use_remove_padding": Rule(None, why=PADDING),
    "model.use_remove_padding": Rule(None, why=PADDING),
    # verl's fsdp_sft_trainer.yaml keeps it at the top level (its examples pass it so)
    "use_remove_padding": Rule(None, why=PADDING),
    **{
        f"{prefix}model.{name}": Rule(f"model.{name}")
        for prefix in ("actor_rollout_ref.", "")
        for name in LORA_KEYS
    },
    # liger-kernel's RoPE, RMSNorm and SwiGLU, what verl's use_liger patches into the model
    **{
        model + "use_liger": Rule("model.liger", commands=commands) for model, commands in HF_MODELS
    },
    # verl's Megatron backend (model.lora.*, Megatron-Bridge's LoRA settings): GRPO's actor,
    # and SFT on verl's Megatron engine
    **{
        section + name: rule
        for section in MEGATRON_LORA_SECTIONS
        for name, rule in _MEGATRON_LORA_RULES.items()
    },
    # algorithm and reward (GRPO)
    "algorithm.use_kl_in_reward": Rule(
        None,
        _only(False, "KL in the reward is not supported; use actor.use_kl_loss (GRPO's KL loss)"),
        why="GRPO here puts KL in the loss (actor.use_kl_loss)",
        commands=("grpo",),
    ),
    **{
        section + name: rule
        for section in ("custom_reward_function.", "reward.custom_reward_function.")
        for name, rule in _CUSTOM_REWARD_RULES.items()
    },
    # reward_model.enable's name since verl's `reward` section (67dc84b96)
    **{
        key: Rule(
            None,
            _only(
                False, "model-based rewards are not supported yet; rewards are rules or reward.path"
            ),
            why="rewards are rules or reward.path",
            commands=("grpo",),
        )
        for key in ("reward_model.enable", "reward.reward_model.enable")
    },
    # SFT data (verl's sft_trainer.yaml)
    "data.train_batch_size": Rule("data.global_batch_size", commands=("sft",)),
    "data.micro_batch_size_per_gpu": Rule("data.micro_batch_size", commands=("sft",)),
    "data.use_dynamic_bsz": Rule("data.packing", commands=("sft",)),
    "data.max_token_len_per_gpu": Rule("data.max_tokens_per_micro_batch", commands=("sft",)),
    # how a micro-batch lays out its sequences, not how micro-batches form: no mfsdp key
    "data.pad_mode": Rule(
        None,
        _only(("no_padding", "right"), "data.pad_mode is no_padding or right (verl's values)"),
        why=PAD_MODE,
        commands=("sft",),
    ),
    "data.multiturn.messages_key": Rule("data.messages_key", commands=("sft",)),
    "data.multiturn.enable": Rule(None, convert=_multiturn, commands=("sft",)),
    # trainer
    "trainer.total_epochs": Rule("trainer.epochs"),
    "trainer.total_training_steps": Rule("trainer.total_steps"),
    "trainer.default_local_dir": Rule("trainer.run_dir"),
    "trainer.save_freq": Rule("checkpoint.save_every", read=_freq("checkpoint.save_every")),
    # in GRPO with `grpo_final_validation` too
    TEST_FREQ: Rule("trainer.eval_every", read=_freq("trainer.eval_every")),
    "trainer.max_actor_ckpt_to_keep": Rule("checkpoint.keep_last"),
    "trainer.max_ckpt_to_keep": Rule("checkpoint.keep_last"),
    "trainer.n_gpus_per_node": Rule(None, why=LAUNCH),
    "trainer.nnodes": Rule(None, why=LAUNCH),
    "trainer.critic_warmup": Rule(
        None, _only(0, "there is no critic in GRPO"), why="GRPO has no critic", commands=("grpo",)
    ),
    "trainer.default_hdfs_dir": Rule(
        None,
        _only(None, "HDFS copies are not supported; trainer.run_dir is local or a mounted path"),
        why="null means no HDFS copy",
    ),
    # trainer.resume_mode + trainer.resume_from_path are read together (see `_resume`)
    # settings mfsdp has no switch for, at the values that leave them off (verl_off_keys)
    **{
        key: Rule(None, _only_off(off), why=off.why, commands=off.commands)
        for key, off in OFF_KEYS.items()
    },
    # settings that change nothing here at any value (verl_inert_keys; its SECTIONS too)
    **{
        key: Rule(None, why=inert.why, commands=inert.commands) for key, inert in INERT_KEYS.items()
    },
}
# the rule of a key no rule names whose last part is one of PARALLEL_SIZES (`verl_keys.carry_over`)
PARALLEL_RULE = Rule(
    None,
    _only((1, None), "mfsdp shards data-parallel only (FSDP): model parallel sizes are 1"),
    why="model parallel sizes are 1 here (FSDP only)",
)
# mfsdp keys of verl's name whose "no limit" verl writes as -1, mfsdp as null
NO_LIMIT = ("data.val_max_samples",)
ESTIMATOR = "algorithm.adv_estimator"
NOT_SET = "null, verl's 'not set'"
# verl keys that copy another by default (`rollout_n: ${oc.select:actor_rollout_ref.rollout.n,1}`):
# one setting here, read as that key's; given with a different value, they are refused
MIRRORS = {
    ACTOR + "rollout_n": ROLLOUT + "n",
    "actor_rollout_ref.ref.rollout_n": ROLLOUT + "n",
    ROLLOUT + "prompt_length": "data.max_prompt_length",
    ROLLOUT + "response_length": "data.max_response_length",
}
RESUME = ("trainer.resume_mode", "trainer.resume_from_path")  # read together (`_resume`)
# verl's optimizer keys whose deprecated name, given not null, takes their place whatever
# the order (verl/workers/config/optimizer.py: FSDPOptimizerConfig.__post_init__ sets
# lr_scheduler_type = warmup_style, OptimizerConfig.__post_init__ clip_grad = grad_clip):
# both map to one mfsdp key, where the one read last won
SUPERSEDED_BY = {
    "optim.lr_scheduler_type": "optim.warmup_style",
    "optim.clip_grad": "optim.grad_clip",
}


_OTHER_TRACKER = (
    "not a tracker here: trainer.logger expects one of console | jsonl | tensorboard | wandb;"
    " drop it from the list"
)
# verl's values of keys mfsdp reads as its own or into its own key unconverted, which that
# key does not take here (a value verl accepts, refused by name: it failed the whole
# conversion as "not a verl script"): verl key -> {value: why}
VERL_ONLY_VALUES: dict[str, dict[str, str]] = {
    # verl/utils/tracking.py Tracking.supported_backend
    "trainer.logger": {
        "file": (
            "verl's file logger writes {step, data} lines to"
            " $VERL_FILE_LOGGER_ROOT/<project>/<experiment>.jsonl; mfsdp writes its metrics to"
            " RUN_DIR/metrics.jsonl always (jsonl), one flat record a step; drop it from the list"
        ),
        **dict.fromkeys(
            ("mlflow", "swanlab", "vemlp_wandb", "clearml", "trackio", "rl_insight"),
            _OTHER_TRACKER,
        ),
    },
    "trainer.device": {"npu": "devices here are cuda and cpu (trainer.device)"},
    # verl/trainer/ppo/core_algos.py kl_penalty: full needs the whole vocabulary's log-probs
    # (its `+` forms carry over: trainer/grpo/kl.py)
    ACTOR + "kl_loss_type": {"full": "the full-vocabulary KL is not available here"},
}


def verl_only_value(key: str, value: Any) -> str | None:
    """Why verl's `value` of `key` (read as `normalise` reads it; a list item by item) has
    no equivalent here, or None: it is one mfsdp's key takes, or not one verl takes either
    (the loader names that)."""
    refused = VERL_ONLY_VALUES.get(key, {})
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, str) and item in refused:
            return f"{item}: {refused[item]}"
    return None


def trainer_of(key: str) -> str | None:
    """The command (sft | grpo) whose verl trainer alone has the top-level section of verl
    key `key` (TRAINER_SECTIONS); None for `data` and `trainer`, both's, and keys of neither."""
    top = key.split(".", 1)[0]
    return next((command for command, tops in TRAINER_SECTIONS.items() if top in tops), None)


def normalise(key: str) -> str:
    """The actor's optimizer section is `optim` here (GRPO trains one model)."""
    if key.startswith(ACTOR + "optim."):
        key = "optim." + key[len(ACTOR + "optim.") :]
    return key


def note(verl_key: str, mapped: dict[str, Any], why: str) -> None:
    """Log what became of a verl key read here, as a `note:` warning: the mfsdp keys it set
    (`mapped`), or, when it set none, that it is ignored and `why`. A verl config is read
    leniently, so every key that does not carry over as itself is said, never dropped
    silently."""
    if mapped:
        shown = ", ".join(
            f"{key}={_as_typed(verl_key, key, value)}" for key, value in mapped.items()
        )
        log.warning("note: verl's %s is %s here", verl_key, shown)
    else:
        log.warning("note: %s", ignored_note(verl_key, why))


def _as_typed(verl_key: str, key: str, value: Any) -> str:
    """`value` as the override was typed (`true` stays `true`, as the error lines quote it),
    else as Python writes it: a value a rule made was typed by nobody."""
    typed = typed_text(key, value) or typed_text(verl_key, value)
    return str(value) if typed is None else typed


def ignored_note(verl_key: str, why: str) -> str:
    """The note `note` says of a verl key that sets nothing here, so that a reader that says
    more of the key (the launch flags `mfsdp config from-verl` writes) can replace it."""
    return f"verl's {verl_key} is ignored: {why}"
