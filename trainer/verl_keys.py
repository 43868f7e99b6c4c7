"""verl's config key names, read as mfsdp's: one table, used by the config loader.

A verl user's overrides (`actor_rollout_ref.actor.optim.lr=1e-6`, `trainer.save_freq=10`,
SFT's `data.train_batch_size=256`) work as they are: each becomes its mfsdp key, with one
logged line that names the canonical key. Keys whose value means something not done here
(`rollout.multi_turn.enable=true`, tensor parallel sizes above 1) fail with one line saying
why, instead of being ignored; settings mfsdp has no switch for pass at the values that leave
them off (`param_offload=False`, trainer.verl_off_keys), settings that change nothing here at
any value (the critic's section in GRPO, `use_torch_compile`: trainer.verl_inert_keys) pass,
each with a note, and a null or `???` (verl's "not set") passes where a rule would read the
value. Keys verl copies from another (MIRRORS) are read as that key, and refused at another
value. docs/verl.md lists every key; `mfsdp config from-verl` prints a verl command line as
YAML.

Units follow verl: GRPO's `ppo_mini_batch_size` and `data.train_batch_size` count prompts
(each rolled out `rollout.n` times), micro-batch sizes count responses per GPU, SFT's
`data.train_batch_size` counts sequences over all GPUs, `max_token_len_per_gpu` tokens.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mfsdp_ckpt.errors import MfsdpUsageError
from trainer import verl_interpolation
from trainer.verl_inert_keys import INERT_KEYS, PADDING, section_of
from trainer.verl_off_keys import (
    MEGATRON_ADAM,
    MEGATRON_LORA_SECTIONS,
    MEGATRON_OPTIMIZER_DEFAULTS,
    OFF_KEYS,
    Off,
    same,
)

log = logging.getLogger("mfsdp.config")

VERL_ONLY_SECTION = "actor_rollout_ref."  # verl's; mfsdp has no section of that name
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


def _freq(value: Any) -> Any:
    """verl's -1 (never) is mfsdp's 0 (periodically never; at the end still)."""
    return 0 if isinstance(value, int) and value < 0 else value


def _only(allowed: Any, why: str) -> Callable[[Any], dict[str, Any]]:
    """A key accepted only at its harmless value(s) here, dropped then; any other value fails."""
    allowed = allowed if isinstance(allowed, tuple) else (allowed,)

    def convert(value: Any) -> dict[str, Any]:
        if value in allowed:
            return {}
        raise Unsupported(why)

    return convert


def _only_off(off: Off) -> Callable[[Any], dict[str, Any]]:
    """`_only` for a key of verl_off_keys, which compares a list in any order and a flag
    never as a number."""

    def convert(value: Any) -> dict[str, Any]:
        if off.accepts(value):
            return {}
        raise Unsupported(off.refused)

    return convert


def _rollout_mode(value: Any) -> dict[str, Any]:
    if value in ("async", "sync"):
        return {}
    raise Unsupported("rollout.mode is async (verl's only mode now) or sync")


def _rollout_dtype(value: Any) -> dict[str, Any]:
    dtypes = {"bfloat16": "bf16", "bf16": "bf16", "float32": "fp32", "fp32": "fp32"}
    if value in dtypes:
        return {"rollout.dtype": dtypes[value]}
    raise Unsupported("rollout.dtype here is bf16 or fp32")


def _rollout_name(value: Any) -> dict[str, Any]:
    if value in ("vllm", "hf", "auto"):
        return {"rollout.name": value}
    raise Unsupported("rollout engines here are vllm and hf (colocated); sglang is not supported")


def _scheduler(value: Any) -> dict[str, Any]:
    if value in ("constant", "cosine", "linear"):
        return {"optim.scheduler": value}
    raise Unsupported("optim.scheduler here is constant, cosine or linear")


def _strategy(value: Any) -> dict[str, Any]:
    if value is True:
        return {"strategy.name": "megatron_fsdp"}
    raise Unsupported(
        "mfsdp shards with Megatron-FSDP or FSDP2 only; set strategy.name=fsdp2 for torch FSDP2"
    )


def _pad_mode(value: Any) -> dict[str, Any]:
    if value in ("no_padding", "right"):
        return {"data.packing": value == "no_padding"}
    raise Unsupported("data.pad_mode here is no_padding (packed) or right (padded)")


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


# verl's Megatron `override_transformer_config` keys that change only what is recomputed and
# which attention kernel runs (verl's defaults set them), not the model or its updates
SPEED_OVERRIDES = (
    "recompute_granularity",
    "recompute_modules",
    "recompute_method",
    "recompute_num_layers",
    "attention_backend",
)
SPEED_OVERRIDES_WHY = (
    "recomputation and the attention kernel: speed or memory only (model.activation_checkpointing"
    " here)"
)


def _transformer_overrides(value: Any) -> dict[str, Any]:
    """verl's Megatron transformer overrides, accepted where they set recomputation and the
    attention kernel only (`SPEED_OVERRIDES`); one that changes the model is refused."""
    if isinstance(value, dict) and set(value) <= set(SPEED_OVERRIDES):
        return {}
    raise Unsupported(
        f"Megatron transformer overrides here are only {', '.join(SPEED_OVERRIDES)} (speed or"
        " memory); the model is its config.json: edit it in a copy of the model dir"
    )


# verl's Megatron LoRA (Megatron-Bridge's): read only when its rank is above 0
LORA_OFF = (
    "LoRA is off (lora.rank 0, verl's default), and verl reads its lora.* settings only when"
    " it is on"
)


def _megatron_lora_section(key: str) -> str | None:
    """The section of verl's Megatron LoRA settings (MEGATRON_LORA_SECTIONS) `key` is in."""
    return next((section for section in MEGATRON_LORA_SECTIONS if key.startswith(section)), None)


def megatron_lora_on(section: str, given: dict[str, Any]) -> bool:
    """Whether the run (`given`: its keys as `carry_over` reads them) turns verl's Megatron
    LoRA on in `section`: its rank given and above 0 (or a value read only at run time);
    verl's default rank 0 builds no adapter and reads no other `lora.*` key
    (verl/workers/config/megatron_peft.py)."""
    rank = given.get(section + "rank")
    off = isinstance(rank, int) and not isinstance(rank, bool) and rank <= 0
    return not (is_unset(rank) or off)


def _lora_off(key: str, given: dict[str, Any]) -> bool:
    """Whether `key` is a setting of verl's Megatron LoRA while it is off: each is ignored
    then at any value, as a bare `lora.merge=false` or `lora.type: lora` is in verl."""
    section = _megatron_lora_section(key)
    if section is None or key == section + "rank":
        return False
    return not megatron_lora_on(section, given)


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

LAUNCH = "a launch setting here: pass --nproc-per-node / --nnodes to mfsdp train"
CLIP_RATIO = ACTOR + "clip_ratio"
# verl's actor.yaml sets both sides (not null), so its clip_ratio alone changes nothing
VERL_CLIP_DEFAULT = 0.2
CLIP_SIDES = {
    side: (f"{ACTOR}clip_ratio_{side}", f"actor.clip_ratio_{side}") for side in ("low", "high")
}

BETAS = "optim.betas"
OPTIMIZER_OVERRIDES = "optim.override_optimizer_config"
MCORE_OPTIMIZER = "McoreOptimizerConfig"  # the class verl builds its Megatron optim section as
MEGATRON_ADAM_WHERE = (
    "verl sets them in optim.override_optimizer_config's adam_beta1, adam_beta2, adam_eps"
)

# verl key -> rule. Optimizer keys are listed once under `optim.` (SFT's section) and also
# reached from the actor's `actor_rollout_ref.actor.optim.` (see `_normalise`).
RULES: dict[str, Rule] = {
    # optimizer (verl's optim/fsdp.yaml and optim/megatron.yaml names)
    "optim.lr_warmup_steps_ratio": Rule("optim.warmup_ratio"),
    "optim.warmup_steps_ratio": Rule("optim.warmup_ratio"),
    "optim.lr_scheduler": Rule("optim.scheduler", _scheduler),
    "optim.min_lr_ratio": Rule(
        None,
        _only((0, 0.0), "optim.min_lr here is absolute: set optim.min_lr to min_lr_ratio x lr"),
        why="0 is mfsdp's default optim.min_lr",
    ),
    "optim.lr_warmup_steps": Rule(
        "optim.warmup_steps", read=lambda v: max(0, v) if isinstance(v, int) else v
    ),
    "optim.lr_decay_style": Rule("optim.scheduler", _scheduler),
    "optim.warmup_style": Rule("optim.scheduler", _scheduler),
    "optim.lr_scheduler_type": Rule("optim.scheduler", _scheduler),
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
    ACTOR + "megatron.use_megatron_fsdp": Rule("strategy.name", _strategy, commands=("grpo",)),
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
            "top_k",
            "gpu_memory_utilization",
            "enforce_eager",
        )
    },
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
        why="the engine sizes it from max_prompt_length + max_response_length",
        commands=("grpo",),
    ),
    "data.max_response_length": Rule("rollout.max_response_length", commands=("grpo",)),
    # model
    "actor_rollout_ref.model.path": Rule("model.path"),
    "actor_rollout_ref.model.tokenizer_path": Rule("model.tokenizer", commands=("grpo",)),
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
    "actor_rollout_ref.model.use_liger": Rule("model.liger", commands=("grpo",)),
    "model.use_liger": Rule("model.liger", commands=("sft",)),
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
    "custom_reward_function.path": Rule("reward.path", commands=("grpo",)),
    "custom_reward_function.name": Rule("reward.name", commands=("grpo",)),
    "reward.custom_reward_function.path": Rule("reward.path", commands=("grpo",)),
    "reward.custom_reward_function.name": Rule("reward.name", commands=("grpo",)),
    "reward_model.enable": Rule(
        None,
        _only(False, "model-based rewards are not supported yet; rewards are rules or reward.path"),
        why="rewards are rules or reward.path",
        commands=("grpo",),
    ),
    # SFT data (verl's sft_trainer.yaml)
    "data.train_batch_size": Rule("data.global_batch_size", commands=("sft",)),
    "data.micro_batch_size_per_gpu": Rule("data.micro_batch_size", commands=("sft",)),
    "data.use_dynamic_bsz": Rule("data.packing", commands=("sft",)),
    "data.max_token_len_per_gpu": Rule("data.max_tokens_per_micro_batch", commands=("sft",)),
    "data.pad_mode": Rule("data.packing", _pad_mode, commands=("sft",)),
    "data.multiturn.messages_key": Rule("data.messages_key", commands=("sft",)),
    # trainer
    "trainer.total_epochs": Rule("trainer.epochs"),
    "trainer.total_training_steps": Rule("trainer.total_steps"),
    "trainer.default_local_dir": Rule("trainer.run_dir"),
    "trainer.save_freq": Rule("checkpoint.save_every", read=_freq),
    "trainer.test_freq": Rule("trainer.eval_every", read=_freq),
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


def rule_for(key: str) -> Rule | None:
    """The rule of verl key `key`: its own, else its section's (verl_inert_keys.SECTIONS)."""
    if key in RULES:
        return RULES[key]
    inert = section_of(key)
    return None if inert is None else Rule(None, why=inert.why, commands=inert.commands)


@functools.cache
def names(command: str) -> dict[str, str | None]:
    """The verl keys `mfsdp train <command>` takes, each with the mfsdp key it sets (None:
    none, or several): a typo of one is told the verl key meant, as a typo of an mfsdp key
    is (the README tells verl users their keys work as they are)."""
    found = {key: rule.target for key, rule in RULES.items() if command in rule.commands}
    if command == "grpo":  # the actor's optimizer section is `optim` here (`_normalise`)
        found |= {ACTOR + key: target for key, target in found.items() if key.startswith("optim.")}
    return found | dict.fromkeys(RESUME, "checkpoint.resume")


def shown_name(key: str, target: str | None) -> str:
    """A verl key as a suggestion: `trainer.save_freq (checkpoint.save_every here)`."""
    return f"{key} ({target} here)" if target else f"{key} (verl's)"


def is_unset(value: Any) -> bool:
    """verl's "not set": null, or OmegaConf's `???` (a value the run must give)."""
    return value is None or value == "???"


def groups(pairs: list[tuple[str, Any]]) -> list[list[tuple[str, Any]]]:
    """`pairs` in the groups `adopt_pairs` reads together, each alone else: resume_mode with
    resume_from_path, a key of MIRRORS with the key it copies, clip_ratio with the sides it
    may fill in."""
    keys = [_normalise(key.lstrip("+")) for key, _value in pairs]
    present = set(keys)  # looked up per key: a list here made many keys quadratic
    clip_keys = {CLIP_RATIO, *(name for names in CLIP_SIDES.values() for name in names)}
    found: dict[str, list[tuple[str, Any]]] = {}
    for key, pair in zip(keys, pairs):
        leader = "resume" if key in RESUME else MIRRORS.get(key, key)
        leader = CLIP_RATIO if key in clip_keys and CLIP_RATIO in present else leader
        leader = leader if leader == "resume" or leader in present else key
        found.setdefault(leader, []).append(pair)
    return list(found.values())


def command_of(cls: type) -> str:
    """`grpo` for GRPO's config class (it has a rollout section), else `sft`."""
    return "grpo" if "rollout" in {f.name for f in dataclasses.fields(cls)} else "sft"


def adopt_tree(cls: type, tree: dict[str, Any], source: str) -> dict[str, Any]:
    """`tree` (a loaded YAML file) with its verl keys rewritten as mfsdp keys. Keys that are
    neither are left in place, for the loader's unknown-key error to name. The verl keys are
    read as verl's loader reads them, with the file's `${a.b}` and `${oc.select:...}`
    references filled in (`verl_interpolation`); mfsdp's own keys as written."""
    from trainer.config import ConfigError, set_dotted
    from trainer.config_yaml import MAX_EXPANDED_CHARS

    if isinstance(tree.get("defaults"), list):  # verl's own config files start with one
        raise ConfigError(
            f"{source}: `defaults:` is Hydra's list of the files verl merges into this one, and"
            f" a config here is one plain file: convert it with `mfsdp config from-verl {source}"
            " > config.yaml`, then give --config config.yaml"
        )
    native, _ = split_foreign(cls, tree)
    filled = copy.deepcopy(tree)
    try:
        verl_interpolation.resolve(filled, MAX_EXPANDED_CHARS)
    except verl_interpolation.InterpolationTooLarge as err:
        raise ConfigError(f"{source}: {err}") from None
    _, foreign = split_foreign(cls, filled)
    foreign.sort(key=lambda pair: pair[0] != ESTIMATOR)  # what the file trains, said first
    try:
        adopted = adopt_pairs(cls, foreign, source)
    except ConfigError as err:  # the first of its verl keys that fails: say where the rest are
        more = _failing(cls, foreign) - 1
        if more < 1:
            raise
        raise ConfigError(
            f"{err}; {more} more key(s) of the file do not carry over either: `mfsdp config"
            f" from-verl {source}` lists them all"
        ) from None
    for key, value in adopted:
        set_dotted(native, key, value)
    return native


def _failing(cls: type, pairs: list[tuple[str, Any]]) -> int:
    """How many of `pairs` fail to carry over, each group of `groups` tried alone (in the
    run's keys read once: read per group, a file of many keys took minutes)."""
    given = keys_given(pairs)
    return sum(refusal(cls, group, given) is not None for group in groups(pairs))


def refusal(cls: type, pairs: list[tuple[str, Any]], given: dict[str, Any]) -> str | None:
    """Why `pairs` (a group of `groups`) do not carry over in the run whose keys are `given`
    (`keys_given`; None: they do), tried without their notes: a value tried is not one the
    run gives."""
    log.disabled, disabled = True, log.disabled
    try:
        carry_over(cls, pairs, given)
    except NotCarried as err:
        return err.reason
    finally:
        log.disabled = disabled
    return None


def adopt_pairs(cls: type, pairs: list[tuple[str, Any]], source: str) -> list[tuple[str, Any]]:
    """Dotted `(key, value)` pairs (command-line overrides, in order) with verl's keys rewritten;
    mfsdp's own keys and unknown keys pass through unchanged. A verl key that does not carry
    over fails naming `source`."""
    from trainer.config import ConfigError

    try:
        return carry_over(cls, pairs) + megatron_adam_unset(cls, pairs)
    except NotCarried as err:
        raise ConfigError(f"{source}: {err.text}") from None


def carry_over(
    cls: type, pairs: list[tuple[str, Any]], given: dict[str, Any] | None = None
) -> list[tuple[str, Any]]:
    """`adopt_pairs` without a source: NotCarried for the first verl key that does not carry
    over. `given` is `keys_given` of every pair of the run where `pairs` is a part of them
    (`groups`), for the rules that read another key (LoRA's rank); the caller reads it once
    for all its groups, as reading it per group made a file of many keys take minutes."""
    command = command_of(cls)
    given = keys_given(pairs) if given is None else given
    out: list[tuple[str, Any]] = []
    resume: dict[str, Any] = {}
    for raw, value in pairs:
        raw_key = raw.lstrip("+")  # Hydra's `+key=` (add) and `++key=` (force)
        key = _normalise(raw_key)
        if key in MIRRORS and MIRRORS[key] in given:
            _check_mirror(raw_key, value, MIRRORS[key], given[MIRRORS[key]])
            continue
        key = MIRRORS.get(key, key)
        if key == BETAS and _verls_betas(raw_key, given) and on_megatron(given):
            out += _betas_on_megatron(raw_key, value, given)
            continue
        if is_native(cls, key):
            value = _native_value(raw_key, key, value)
            if key != raw_key:
                _note(raw_key, {key: value}, "")
            out.append((key, value))
            continue
        leaf = key.rsplit(".", 1)[-1]
        if leaf == "_target_":  # the class verl builds the section as (its YAML files): no setting
            continue
        if key in RESUME:
            resume[leaf] = value
            continue
        raw_key, key, value = _as_whole(raw_key, key, value)
        if key == OPTIMIZER_OVERRIDES and on_megatron(given):
            out += _optimizer_overrides_on_megatron(raw_key, value, given)
            continue
        if _lora_off(key, given):
            _note(raw_key, {}, LORA_OFF)
            continue
        rule = rule_for(key)
        if rule is None and leaf in PARALLEL_SIZES:
            rule = Rule(
                None,
                _only(
                    (1, None), "mfsdp shards data-parallel only (FSDP): model parallel sizes are 1"
                ),
                why="model parallel sizes are 1 here (FSDP only)",
            )
        # the key as written: `actor_rollout_ref.actor.optim.x` is `optim.x` only once mapped
        if rule is None and raw_key.startswith(VERL_ONLY_SECTION):
            if is_unset(value):  # a setting verl leaves at its default: nothing to carry
                _note(raw_key, {}, NOT_SET)
                continue
            raise NotCarried(_unmapped_message(cls, raw_key))
        if rule is None:
            out.append((key, value))  # not a verl key we know: the loader names the closest keys
            continue
        if command not in rule.commands:
            raise NotCarried(
                f"verl key '{raw_key}' is for mfsdp train {rule.commands[0]}, not {command}"
            )
        if key == CLIP_RATIO:
            out += _clip_ratio(raw_key, value, given)
            continue
        if is_unset(value) and (rule.convert is not None or rule.target is not None):
            _note(raw_key, {}, NOT_SET)  # (`warmup_style: null`, verl's own default): the
            continue  # default stands, as for a key not given
        try:
            mapped = rule.apply(cls, value)
        except Unsupported as err:
            raise NotCarried(
                f"verl key '{raw_key}={value}' has no equivalent here: {err}", str(err)
            ) from None
        _note(raw_key, mapped, rule.why)
        out += mapped.items()
    if resume:
        out.append(("checkpoint.resume", _resume(resume)))
    return out


def keys_given(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """The run's keys as the rules read them (Hydra's `+` dropped, the actor's optimizer as
    `optim.`), each with its value."""
    return {_normalise(key.lstrip("+")): value for key, value in pairs}


def _verls_betas(raw_key: str, given: dict[str, Any]) -> bool:
    """Whether `raw_key` (read as `optim.betas`) is verl's: the actor's, or a top-level one
    in an optimizer section verl printed (SFT's Megatron engine); mfsdp's own `optim.betas`
    beside verl's keys is the user's setting, kept as given."""
    target = given.get("optim._target_")
    return raw_key != BETAS or (isinstance(target, str) and target.endswith(MCORE_OPTIMIZER))


def on_megatron(given: dict[str, Any]) -> bool:
    """Whether the run (`given`: its keys, the actor's optimizer read as `optim.`) trains
    on verl's Megatron backend, whose optimizer takes Adam's betas and eps from Megatron's
    OptimizerConfig, never from `optim.betas`: the actor's strategy where given (verl's
    main_ppo picks its workers by it), else the class of the optimizer section (verl's
    printed config, SFT's Megatron engine too), else a `megatron.*` setting of the actor or
    the reference model (a section only verl's Megatron configs have)."""
    strategy = given.get(ACTOR + "strategy")
    if isinstance(strategy, str):
        return strategy == "megatron"
    target = given.get("optim._target_")
    if isinstance(target, str):
        return target.endswith(MCORE_OPTIMIZER)
    return any(key.startswith((ACTOR + "megatron.", REF + "megatron.")) for key in given)


def _megatron_adam(given: dict[str, Any]) -> dict[str, Any]:
    """Adam's betas and eps as verl's Megatron backend trains with them (mfsdp keys):
    Megatron's defaults, overridden by the run's `optim.override_optimizer_config`, given
    whole or key by key (`override_optimizer_config.adam_beta2=0.95`)."""
    adam = dict(MEGATRON_ADAM)
    prefix = OPTIMIZER_OVERRIDES + "."
    for key, value in given.items():
        if key == OPTIMIZER_OVERRIDES and isinstance(value, dict):
            adam |= {name: setting for name, setting in value.items() if name in adam}
        elif key.startswith(prefix) and key[len(prefix) :] in adam:
            adam[key[len(prefix) :]] = value
    return {BETAS: [adam["adam_beta1"], adam["adam_beta2"]], "optim.eps": adam["adam_eps"]}


def megatron_adam_unset(cls: type, pairs: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Megatron's Adam betas and eps (mfsdp keys) for a run (`pairs`: all its keys) on
    verl's Megatron backend that sets neither `optim.betas` nor the optimizer's overrides,
    where mfsdp's defaults for `cls` differ (SFT's beta2 0.95): verl trains with Megatron's
    then, and a hand-written SFT YAML naming McoreOptimizerConfig without betas kept
    mfsdp's. A key written on the way out is one the rules for given betas or overrides
    would have written (`_betas_on_megatron`, `_optimizer_overrides_on_megatron`)."""
    given = {_normalise(key.lstrip("+")): value for key, value in pairs}
    overrides = (OPTIMIZER_OVERRIDES, OPTIMIZER_OVERRIDES + ".")
    if not on_megatron(given) or any(key == BETAS or key.startswith(overrides) for key in given):
        return []
    own = cls().optim
    mfsdps = {BETAS: list(own.betas), "optim.eps": own.eps}
    unset = {
        key: value
        for key, value in _megatron_adam(given).items()
        if key not in given and not same(value, mfsdps[key])
    }
    if unset:
        shown = ", ".join(f"{key}={value}" for key, value in unset.items())
        log.warning(
            "note: %s here: verl's Megatron backend trains with Megatron's Adam settings,"
            " not mfsdp's defaults (%s)",
            shown,
            MEGATRON_ADAM_WHERE,
        )
    return list(unset.items())


def _betas_on_megatron(raw_key: str, value: Any, given: dict[str, Any]) -> list[tuple[str, Any]]:
    """verl's `optim.betas` on its Megatron backend, which never reads it: not carried; the
    betas here are the ones that run trains with (`_megatron_adam`)."""
    betas = _megatron_adam(given)[BETAS]
    log.warning(
        "note: verl's %s=%s is not read by verl's Megatron backend, which trains with"
        " Megatron's Adam betas: optim.betas=%s here (%s)",
        raw_key,
        value,
        betas,
        MEGATRON_ADAM_WHERE,
    )
    return [(BETAS, betas)]


def _optimizer_overrides_on_megatron(
    raw_key: str, value: Any, given: dict[str, Any]
) -> list[tuple[str, Any]]:
    """verl's `optim.override_optimizer_config` on its Megatron backend: fields of
    Megatron's OptimizerConfig set over verl's. adam_beta1, adam_beta2 and adam_eps are
    optim.betas and optim.eps here; a field at Megatron's default changes nothing; any
    other is refused. Null or `{}` leaves Megatron's defaults, written here too (mfsdp's
    SFT default betas are not Megatron's)."""
    overrides = {} if value is None else value
    if not isinstance(overrides, dict) or not all(
        name in MEGATRON_ADAM
        or (
            name in MEGATRON_OPTIMIZER_DEFAULTS and same(setting, MEGATRON_OPTIMIZER_DEFAULTS[name])
        )
        for name, setting in overrides.items()
    ):
        defaults = ", ".join(
            f"{name}={setting}" for name, setting in MEGATRON_OPTIMIZER_DEFAULTS.items()
        )
        why = (
            "Megatron optimizer overrides here are adam_beta1, adam_beta2 and adam_eps"
            f" (optim.betas, optim.eps), and {defaults} (Megatron's defaults)"
        )
        raise NotCarried(f"verl key '{raw_key}={value}' has no equivalent here: {why}", why)
    mapped = _megatron_adam(given)
    _note(raw_key, mapped, "")
    return list(mapped.items())


def _as_whole(raw_key: str, key: str, value: Any) -> tuple[str, str, Any]:
    """A key inside a verl key that takes a mapping (`data.apply_chat_template_kwargs.
    enable_thinking=false`) as that key set to the mapping, so its rule judges it as the
    mapping written whole; it was an unknown key whose hint named the key itself."""
    if key in RULES:
        return raw_key, key, value
    parts = key.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        whole = ".".join(parts[:cut])
        if whole in RULES:
            for part in reversed(parts[cut:]):
                value = {part: value}
            rest = len(key) - len(whole)
            return raw_key[: len(raw_key) - rest], whole, value
    return raw_key, key, value


def _clip_ratio(raw_key: str, value: Any, given: dict[str, Any]) -> list[tuple[str, Any]]:
    """verl's clip_ratio, read as verl's policy loss reads it: a side takes it only where that
    side's clip_ratio_low / clip_ratio_high is null (`clip_ratio_low if not None else
    clip_ratio`), and verl's actor.yaml sets both to 0.2, so given alone it changes nothing
    in verl, nor here. `given` is every key of the run, so the order they come in does not
    matter (last-given once wrote both sides)."""
    if is_unset(value):
        _note(raw_key, {}, NOT_SET)
        return []
    mapped: dict[str, Any] = {}
    kept: list[str] = []
    for side, (verl_key, key) in CLIP_SIDES.items():
        if key not in given and verl_key in given and is_unset(given[verl_key]):
            mapped[key] = value
            continue
        side_value = given.get(key, given.get(verl_key))
        shown = f"{VERL_CLIP_DEFAULT} (its default)" if side_value is None else side_value
        kept.append(f"clip_ratio_{side}={shown}")
    if mapped:
        _note(raw_key, mapped, "")
    if kept:
        log.warning(
            "note: verl's %s=%s is not read%s: verl reads it only where"
            " clip_ratio_low or clip_ratio_high is null, and trains with %s, as mfsdp does"
            " (actor.clip_ratio_low, actor.clip_ratio_high); set those to change the clip range",
            raw_key,
            value,
            f" for {kept[0].split('=')[0]}" if mapped else "",
            " and ".join(kept),
        )
    return list(mapped.items())


def _check_mirror(raw_key: str, value: Any, copied: str, original: Any) -> None:
    """A verl key that copies `copied` by default, given beside it: ignored at the same
    value, refused at another (mfsdp has one setting for both)."""
    if not same(value, original):
        why = (
            f"it differs from {copied}={original}, which verl copies into it by default, and"
            " they are one setting here (give them one value)"
        )
        raise NotCarried(f"verl key '{raw_key}={value}' has no equivalent here: {why}", why)
    _note(raw_key, {}, f"verl copies {copied} into it")


def _native_value(raw_key: str, key: str, value: Any) -> Any:
    """The value of an mfsdp key of verl's name as mfsdp reads it: verl's -1 ("no limit")
    is null; an advantage estimator other than GRPO's is refused in one line."""
    if key == ESTIMATOR and value != "grpo":
        default = " (verl's default, gae, is PPO with a critic)" if value == "gae" else ""
        why = f"mfsdp trains GRPO only; set algorithm.adv_estimator=grpo{default}"
        raise NotCarried(f"{raw_key}={value}: {why}", why)
    if key in NO_LIMIT and same(value, -1):
        _note(raw_key, {key: None}, "")
        return None
    return value


def target_of(cls: type, given: str) -> str | None:
    """The mfsdp key the key `given` (mfsdp's or verl's) sets in a config of `cls`, whatever
    its value: None where it sets none, or several."""
    key = _normalise(given.lstrip("+"))
    key = MIRRORS.get(key, key)
    if is_native(cls, key):
        return key
    if key in RESUME:
        return "checkpoint.resume"
    rule = rule_for(key)
    return rule.target if rule is not None else None


def carries(cls: type, given: str) -> bool:
    """Whether `adopt_pairs` takes the key `given` into a config of `cls` (an mfsdp key, or a
    verl key a rule maps for this command), whatever its value."""
    key = _normalise(given.lstrip("+"))
    key = MIRRORS.get(key, key)
    if is_native(cls, key) or key in RESUME:
        return True
    rule = rule_for(key)
    return rule is not None and command_of(cls) in rule.commands


def _unmapped_message(cls: type, key: str) -> str:
    """For a key under verl's `actor_rollout_ref.` that no rule maps: the whole key as
    written, and mfsdp's key of the same name where there is one (`rollout.dtype`), else the
    verl keys it may be a typo of. The loader named only the section ("unknown config key
    'actor_rollout_ref'") and guessed a key from its name."""
    from trainer.config import close_keys

    tail = key[len(VERL_ONLY_SECTION) :]
    verl = names(command_of(cls))
    close = close_keys(key, [], [name for name in verl if name.startswith(VERL_ONLY_SECTION)])
    if is_native(cls, tail):
        hint = f"did you mean {tail}?"
    elif close:
        hint = f"did you mean {', '.join(shown_name(name, verl[name]) for name in close)}?"
    else:
        hint = f"`mfsdp config defaults {command_of(cls)}` lists mfsdp's keys"
    return f"verl key '{key}' is not one mfsdp maps (docs/verl.md); {hint}"


def split_foreign(
    cls: type, tree: dict[str, Any], prefix: str = ""
) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """The part of `tree` that names `cls`'s fields, and the rest as dotted pairs."""
    hints = field_types(cls)
    native: dict[str, Any] = {}
    foreign: list[tuple[str, Any]] = []
    for key, value in tree.items():
        kind = hints.get(key) if isinstance(key, str) else None
        if kind is None:
            foreign += _flatten(f"{prefix}{key}", value)
        elif dataclasses.is_dataclass(kind) and isinstance(value, dict):
            native[key], more = split_foreign(typing.cast(type, kind), value, f"{prefix}{key}.")
            foreign += more
        elif _read_as_verl(f"{prefix}{key}", value):
            foreign.append((f"{prefix}{key}", value))
        else:
            native[key] = value
    return native, foreign


def _read_as_verl(key: str, value: Any) -> bool:
    """Whether the mfsdp key `key` is read with verl's keys (`adopt_pairs`): at a value of
    verl's meaning (`_native_value`), as one a verl key copies (MIRRORS), to be checked
    against it, or as `optim.betas`, which verl's Megatron backend never reads (SFT's
    `optim` section is mfsdp's too)."""
    verl_value = (key == ESTIMATOR and value != "grpo") or (key in NO_LIMIT and same(value, -1))
    return verl_value or key in MIRRORS.values() or key == BETAS


def _flatten(key: str, value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, dict) and value and key not in RULES:
        return [pair for sub, item in value.items() for pair in _flatten(f"{key}.{sub}", item)]
    return [(key, value)]


def _normalise(key: str) -> str:
    """The actor's optimizer section is `optim` here (GRPO trains one model)."""
    if key.startswith(ACTOR + "optim."):
        key = "optim." + key[len(ACTOR + "optim.") :]
    return key


@functools.cache
def field_types(cls: type) -> types.MappingProxyType[str, Any]:
    """The field types of the config section `cls`, read once per class: every key of a
    config is looked up here, and `typing.get_type_hints` evaluates each annotation anew
    (about a millisecond a class), which made a file of thousands of keys take minutes."""
    return types.MappingProxyType(typing.get_type_hints(cls))


def is_native(cls: type, key: str) -> bool:
    """Whether dotted `key` names a field of `cls` (a mapping field absorbs the rest of the key)."""
    kind: Any = cls
    for part in key.split("."):
        if not dataclasses.is_dataclass(kind):
            return typing.get_origin(kind) is dict
        hints = field_types(typing.cast(type, kind))
        if part not in hints:
            return False
        kind = hints[part]
    return True


def _resume(resume: dict[str, Any]) -> str:
    """verl's resume_mode (auto | disable | resume_path) and resume_from_path ->
    checkpoint.resume."""
    mode, path = resume.get("resume_mode", "auto"), resume.get("resume_from_path")
    if mode == "resume_path" or (mode == "auto" and path):
        if not path:
            raise NotCarried("trainer.resume_mode=resume_path needs trainer.resume_from_path")
        target = str(path)
    elif mode in ("auto", "disable"):
        target = mode
    else:
        raise NotCarried(f"trainer.resume_mode must be auto, disable or resume_path, got {mode!r}")
    _note("trainer.resume_mode/resume_from_path", {"checkpoint.resume": target}, "")
    return target


def _note(verl_key: str, mapped: dict[str, Any], why: str) -> None:
    if mapped:
        shown = ", ".join(f"{key}={value}" for key, value in mapped.items())
        log.warning("note: verl's %s is %s here", verl_key, shown)
    else:
        log.warning("note: verl's %s is ignored: %s", verl_key, why)
