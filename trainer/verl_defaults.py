"""verl's defaults where mfsdp's differ, for `mfsdp config from-verl`: one table per verl trainer.

A verl run trains with verl's default for every key its script leaves out. mfsdp's defaults are
its own (`mfsdp config defaults grpo`: a small GRPO run with the KL loss on and 5 responses per
prompt), so a converted script that relied on verl's `use_kl_loss: false` or `rollout.n: 1`
trained something else without a word. The conversion writes verl's value for each key below
that the source does not set, with a note; `mfsdp train` on its own keeps mfsdp's defaults
(docs/verl.md lists both).

Only keys whose default changes what is trained or how the run goes are here (batch sizes,
epochs, the KL loss, warm-up, data columns, validation before and after training, activation
checkpointing, and how fsdp_sft_trainer forms and weighs its micro-batches, which no key of
verl's sets); names (`project_name`), trackers (`logger`: wandb needs a key), paths and
devices stay mfsdp's. Values are those of verl's trainer/config files: main_ppo's
_generated_ppo_trainer.yaml, fsdp_sft_trainer's sft_trainer.yaml, sft_trainer's
sft_trainer_engine.yaml with its optim/fsdp.yaml and model/hf_model.yaml.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Default:
    """verl's `value` for the mfsdp key `key`, which verl names `verl_key`; or, where no key
    of verl's sets it (`verl_key` None), what of verl's trainer the value stands for (`how`)."""

    key: str
    verl_key: str | None
    value: Any
    how: str = ""

    def said(self) -> str:
        """verl's default as the note on it written names it: by the key the source does not
        set (with what its value there does, where that key is not this one's), or by what
        it stands for where no key of verl's sets it."""
        if self.verl_key is None:
            return f"({self.how})"
        how = f": {self.how}" if self.how else ""
        return f"({self.verl_key}{how}), which the source does not set"


_VERL_CHECKPOINTING = "model.enable_gradient_checkpointing"
_CHECKPOINTING = Default("model.activation_checkpointing", _VERL_CHECKPOINTING, True)
_SFT_COMMON = (
    Default("data.global_batch_size", "data.train_batch_size", 256),
    Default("data.micro_batch_size", "data.micro_batch_size_per_gpu", 4),
    Default("trainer.epochs", "trainer.total_epochs", 4),
    Default("trainer.seed", "trainer.seed", 1),
    _CHECKPOINTING,
)

# verl's trainer module -> its defaults that differ from mfsdp's
TRAINERS: dict[str, tuple[Default, ...]] = {
    "verl.trainer.main_ppo": (
        Default("data.train_batch_size", "data.train_batch_size", 1024),
        Default("actor.ppo_mini_batch_size", "actor_rollout_ref.actor.ppo_mini_batch_size", 256),
        Default("actor.use_kl_loss", "actor_rollout_ref.actor.use_kl_loss", False),
        Default("rollout.n", "actor_rollout_ref.rollout.n", 1),
        Default("data.filter_overlong_prompts", "data.filter_overlong_prompts", False),
        Default("trainer.val_before_train", "trainer.val_before_train", True),
        Default(
            "trainer.val_after_last_step",
            "trainer.test_freq",
            False,
            how="-1, with which main_ppo never validates after a step, the last included",
        ),
        Default("trainer.epochs", "trainer.total_epochs", 30),
        Default(_CHECKPOINTING.key, "actor_rollout_ref." + _VERL_CHECKPOINTING, True),
    ),
    "verl.trainer.fsdp_sft_trainer": (
        *_SFT_COMMON,
        Default("data.prompt_key", "data.prompt_key", "question"),
        Default("data.response_key", "data.response_key", "answer"),
        Default("optim.warmup_ratio", "optim.lr_warmup_steps_ratio", 0.1),
        # its micro-batches and their loss (fsdp_sft_trainer.py training_step and
        # _compute_loss_and_backward): no key of verl's sets either
        Default(
            "data.loss_normalization",
            None,
            "micro_batch",
            how="no key: verl.trainer.fsdp_sft_trainer takes each micro-batch's own token mean"
            " and averages them, a micro-batch of short responses weighing as much as one of"
            " long ones; data.loss_normalization=global, verl.trainer.sft_trainer's, takes one"
            " token mean over the global batch; docs/sft.md",
        ),
        Default(
            "data.packing",
            None,
            False,
            how="no key: verl.trainer.fsdp_sft_trainer splits each rank's rows into"
            " micro-batches of data.micro_batch_size_per_gpu padded rows, use_remove_padding"
            " or not: data.micro_batch_size rows here, micro-batches that"
            " data.loss_normalization=micro_batch weighs as verl does",
        ),
    ),
    "verl.trainer.sft_trainer": (
        *_SFT_COMMON,
        Default("data.max_tokens_per_micro_batch", "data.max_token_len_per_gpu", 8192),
        Default("optim.lr", "optim.lr", 1e-3),
        Default("optim.betas", "optim.betas", [0.9, 0.999]),
        Default("optim.scheduler", "optim.lr_scheduler_type", "constant"),
    ),
}
# verl's weight decay where a run sets none (optim/fsdp.yaml, sft_trainer.yaml; the actor's
# optim section in _generated_ppo_trainer.yaml): mfsdp's default too, so not in TRAINERS,
# though verl's FSDP backend decays every parameter with it and mfsdp weight matrices only
FSDP_WEIGHT_DECAY = 0.01
GRPO_TRAINER = "verl.trainer.main_ppo"
SFT_TRAINERS = ("verl.trainer.fsdp_sft_trainer", "verl.trainer.sft_trainer")


@dataclass(frozen=True)
class Unmapped:
    """verl's `value` for its key `verl_key`, which no mfsdp key holds: the key's own rule
    (verl_rules.RULES) reads it as if the source gave it, so a default mfsdp cannot train is
    listed as not carried over as the same value given is; `here` is the value to set in
    verl for the training mfsdp does."""

    verl_key: str
    value: Any
    here: Any


def megatron_lora(section: str) -> tuple[list[Default], list[Unmapped]]:
    """verl's Megatron LoRA defaults (verl/workers/config/megatron_peft.py, the `lora:`
    section of _generated_ppo_megatron_trainer.yaml) that differ from mfsdp's, for a run that
    turns it on in `section` (verl_off_keys.MEGATRON_LORA_SECTIONS; off, none is read):
    Megatron-Bridge's fused `lora` with a xavier-initialised A, where mfsdp trains one PEFT
    adapter per Hugging Face module with a kaiming-initialised A, and alpha 32."""
    return [Default("model.lora_alpha", section + "alpha", 32)], [
        Unmapped(section + "type", "lora", "canonical_lora"),
        Unmapped(section + "lora_A_init_method", "xavier", "kaiming"),
    ]


def verl_defaults(command: str, module: str | None) -> tuple[list[Default], list[str]]:
    """verl's defaults for a run of verl's trainer `module` (None: a YAML, which does not name
    it), and the mfsdp keys whose verl default depends on which of verl's SFT trainers reads
    it."""
    if command == "grpo":
        return list(TRAINERS[GRPO_TRAINER]), []
    if module in SFT_TRAINERS:
        return list(TRAINERS[module]), []
    tables = [TRAINERS[name] for name in SFT_TRAINERS]
    common = [item for item in tables[0] if all(item in table for table in tables[1:])]
    either = sorted({item.key for table in tables for item in table if item not in common})
    return common, either
