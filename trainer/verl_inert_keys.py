"""verl keys that change nothing in a run here at any value: one table, read by
`trainer.verl_rules`, beside `trainer.verl_off_keys` (keys accepted only at the values that
leave them off).

verl prints the whole config it resolved when it starts, and people keep it as their run's
YAML; `mfsdp config from-verl` on it (or on verl's _generated_ppo_trainer.yaml) listed every
key of sections a GRPO run never reads, a critic's, a reward model's, the profiler's, Ray's,
and of settings of speed or memory alone, so the keys that do mean something were lost among
them. A key here is ignored with a note saying why, whatever its value:

- a section verl reads only for a part a run here does not have, whose switch is a key of
  its own refused unless off: the critic (`critic.enable`, `algorithm.adv_estimator`), the
  reward model (`reward_model.enable`), the profiler (`*.profiler.enable`,
  `global_profiler.steps`), multi-turn rollouts (`multi_turn.enable`), multi-token
  prediction (`mtp.enable`); its values are verl's copies of other keys (a critic's
  `ppo_epochs` is the actor's) and would not be read by verl either;
- settings of speed, memory or logging (`use_torch_compile`, `reshard_after_forward`,
  vLLM's batching, `dataloader_num_workers`): the same updates either way.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainer.verl_off_keys import (
    CHECKPOINT_SECTIONS,
    DAPO_OVERLONG,
    DAPO_OVERLONG_CFG,
    DAPO_OVERLONG_KEY,
    FSDP_ENGINES,
    FSDP_OFFLOAD,
    HF_MODELS,
    MEGATRON_ENGINES,
    MEGATRON_LORA_SECTIONS,
    MEGATRON_OFFLOAD,
)


@dataclass(frozen=True)
class Inert:
    """A verl key (or every key of a section) ignored at any value; the note says `why`."""

    why: str
    commands: tuple[str, ...] = ("grpo",)


ACTOR = "actor_rollout_ref.actor."
REF = "actor_rollout_ref.ref."
ROLLOUT = "actor_rollout_ref.rollout."
SPEED = "speed or memory only: the same updates"
SEEDED = "runs here are seeded by trainer.seed"
BY_ROLE = "verl sets it by role (the reference model's is true)"
HF_LOADS = "Hugging Face checkpoints load directly here"


def only_with(what: str, switch: str, state: str = "on") -> str:
    """The note of a key verl reads only while `switch`, a key of its own, is `state`: said
    so, not that it is off, which a run that turned the switch on (refused or not by the
    switch's own rule) would read as a contradiction."""
    return f"{what}, which verl reads only with {switch} {state}"


KL_IN_REWARD = only_with("the KL penalty in the reward", "algorithm.use_kl_in_reward")
QAT = only_with("quantization-aware training", "qat.enable")
MODULE_PATH_ONLY = "used only with reward_manager.module.path"
SHAPE_PADDING = "padding to fewer distinct shapes, stripped before the loss: " + SPEED
PROFILER_SETTINGS = "the profiler's settings"
PROFILER = only_with(PROFILER_SETTINGS, "profiler.enable or global_profiler.steps")
REWARD_MODEL = "the reward model's settings"
ROUTING_REPLAY = only_with("MoE routing replay", "router_replay.mode", "set")
MTP = only_with("multi-token prediction's settings", "mtp.enable")
WEIGHT_SYNC = (
    "how verl moves weights into its engine; the engine here gets the actor's weights before"
    " each rollout"
)
# what verl's use_remove_padding switches, decided here by data.packing, which verl's
# data.use_dynamic_bsz sets (its data.pad_mode does not: PAD_MODE)
PADDING = (
    "padding follows data.packing here (SFT packs without padding unless data.packing=false,"
    " which verl's data.use_dynamic_bsz=False sets, not its data.pad_mode; GRPO pads each"
    " micro-batch to its longest sequence)"
)
# verl's sft_trainer: pad_mode is how each micro-batch holds its sequences (its collator and
# engine: nested and packed, or each padded to data.max_length), use_dynamic_bsz how the
# micro-batches are formed (token budget or micro_batch_size_per_gpu rows). The loss masks
# the padding, so only the second changes what trains together, and data.packing follows it.
# At no_padding its dataset also cuts an over-long row from the right (verl_truncation)
PAD_MODE = (
    "how verl lays out the sequences inside a micro-batch (no_padding: packed, right: each"
    " padded to data.max_length), the loss masking padding; data.packing here follows"
    " data.use_dynamic_bsz, which decides how micro-batches are formed. It also decides which"
    " end of an over-long row is cut: at no_padding the right, whatever data.truncation says"
)

# every key under each of these (a key of `trainer.verl_off_keys` under one is read there)
SECTIONS: dict[str, Inert] = {
    "critic.": Inert(
        "there is no critic in GRPO (verl builds one only for adv_estimator=gae or"
        " critic.enable=true)"
    ),
    "reward_model.": Inert(only_with(REWARD_MODEL, "reward_model.enable")),
    **{
        f"{section}.": Inert(only_with(DAPO_OVERLONG, f"{section}.enable"))
        for section in (DAPO_OVERLONG_KEY, DAPO_OVERLONG_CFG)
    },
    "reward_model.reward_kwargs.": Inert(
        "settings of verl's reward managers other than its naive one (max_resp_len: the DAPO"
        " manager's overlong penalty), not available here; its manager must be naive"
        " (reward_model.reward_manager)"
    ),
    "global_profiler.": Inert(PROFILER),
    **{f"{role}profiler.": Inert(PROFILER) for role in (ACTOR, REF, ROLLOUT)},
    "profiler.": Inert(
        only_with(PROFILER_SETTINGS, "profiler.enable or trainer.profile_interval"),
        ("sft",),
    ),
    ROLLOUT + "multi_turn.": Inert(only_with("multi-turn settings", "multi_turn.enable")),
    **{model + "mtp.": Inert(MTP, commands) for model, commands in HF_MODELS},
    ROLLOUT + "mtp.": Inert(MTP),
    ROLLOUT + "checkpoint_engine.": Inert(WEIGHT_SYNC),
    # the names verl's Megatron backend gives its fused layers when it hands them to the engine
    ROLLOUT + "layer_name_map.": Inert(WEIGHT_SYNC),
    ROLLOUT + "trace.": Inert("tracing of rollouts: logging only"),
    ROLLOUT + "prometheus.": Inert("the engine's Prometheus metrics: monitoring only"),
    **{
        model + section: Inert(SPEED, commands)
        for model, commands in HF_MODELS
        for section in ("fused_kernel_options.", "tiled_mlp.")
    },
    "algorithm.kl_ctrl.": Inert(KL_IN_REWARD),
    "algorithm.pf_ppo.": Inert(only_with("PF-PPO's reweighting", "algorithm.use_pf_ppo")),
    "algorithm.rollout_correction.": Inert(
        only_with("rollout correction's thresholds", "rollout_correction.rollout_is or rollout_rs")
    ),
    "ray_kwargs.": Inert("Ray's settings: there is no Ray here (mfsdp train runs torchrun)"),
    # sections verl added after b178a3cd, each read only when its switch (verl_off_keys) is on
    "reward.reward_model.": Inert(only_with(REWARD_MODEL, "reward.reward_model.enable")),
    **dict.fromkeys(
        ("reward.sandbox_fusion.", "sandbox_fusion."),
        Inert(only_with("the code sandbox's settings", "sandbox_fusion.url", "set")),
    ),
    "distillation.": Inert(only_with("distillation's settings", "distillation.enabled")),
    "skip.": Inert(only_with("verl's rollout caching", "skip.rollout.enable (and the like)")),
    "algorithm.filter_groups.": Inert(
        only_with("DAPO's dynamic sampling", "algorithm.filter_groups.enable")
    ),
    "trainer.v1.": Inert(
        "settings of verl's V1 trainer's asynchronous modes; it trains in sync mode"
        " (trainer.v1.trainer_mode)"
    ),
    ROLLOUT + "disaggregation.": Inert(
        only_with("disaggregated prefill and decode", "disaggregation.enabled")
    ),
    **{
        f"{role}{section}qat.": Inert(QAT)
        for role in (ACTOR, REF)
        for section in ("", "fsdp_config.")
    },
    **{engine + "qat.": Inert(QAT, commands) for engine, commands in MEGATRON_ENGINES},
    **{
        engine + "router_replay.": Inert(ROUTING_REPLAY, commands)
        for engine, commands in MEGATRON_ENGINES
    },
    **{
        engine + "turbo_config.": Inert(
            "settings of verl's fsdp_turbo engine, read only with strategy fsdp_turbo", commands
        )
        for engine, commands in FSDP_ENGINES
    },
    "transfer_queue.": Inert("how verl moves batches between its workers"),
    # Hydra's own config (`hydra.run.dir`, `hydra.job.chdir`, a user config's `hydra:
    # searchpath:` header) and its groups (`hydra/job_logging=disabled`): how verl's config
    # is found and its run's output and logs are kept, never a key of the run's config
    **dict.fromkeys(
        ("hydra.", "hydra/"),
        Inert(
            "Hydra's own settings (its output dir, logging, job and config search path), not"
            " a training setting",
            ("sft", "grpo"),
        ),
    ),
}


def _engine() -> dict[str, Inert]:
    """verl's FSDP engine settings (FSDP_ENGINES: the actor's, the reference model's,
    SFT's) that change no update."""
    keys = {
        "reshard_after_forward": SPEED,
        "forward_prefetch": SPEED,
        "use_torch_compile": SPEED,
        "entropy_from_logits_with_chunking": SPEED,
        "entropy_checkpointing": SPEED,
        "use_orig_params": "how torch's FSDP1 keeps parameters",
        "seed": SEEDED,
        "forward_only": BY_ROLE,
    }
    return {
        engine + name: Inert(why, commands)
        for engine, commands in FSDP_ENGINES
        for name, why in keys.items()
    }


def _megatron_engine() -> dict[str, Inert]:
    """verl's Megatron engine settings (MEGATRON_ENGINES: the actor's, the reference
    model's, SFT's) that change no update (its offload, parallel sizes, dtype and
    overrides: trainer.verl_off_keys)."""
    keys = {
        "sequence_parallel": (
            "Megatron's sequence parallelism splits activations over tensor-parallel ranks,"
            " of which there is one here"
        ),
        "use_distributed_optimizer": SPEED,
        "dist_checkpointing_prefix": "used only with use_dist_checkpointing",
        "seed": SEEDED,
        "forward_only": BY_ROLE,
        "use_remove_padding": PADDING,
        "use_mbridge": HF_LOADS,
        "vanilla_mbridge": HF_LOADS,
        "entropy_from_logits_chunk_size": SPEED,
        "entropy_from_logits_with_chunking": SPEED,
        **dict.fromkeys(
            ("pad_to_length", "pad_to_length_bucket", "pad_bshd_to_minibatch_max"), SHAPE_PADDING
        ),
        **dict.fromkeys(
            ("dist_ckpt_optim_fully_reshardable", "distrib_optim_fully_reshardable_mem_efficient"),
            "how verl's Megatron checkpoints save the optimizer",
        ),
        "max_seqlen_per_dp_cp_rank": "used only with dynamic_context_parallel",
    }
    return {
        engine + name: Inert(why, commands)
        for engine, commands in MEGATRON_ENGINES
        for name, why in keys.items()
    }


def _roles() -> dict[str, Inert]:
    """The actor's and the reference model's own keys that change no update."""
    both = {
        "use_torch_compile": SPEED,
        "entropy_from_logits_with_chunking": SPEED,
        "entropy_checkpointing": SPEED,
        "log_prob_max_token_len_per_gpu": "used only with use_dynamic_bsz",
        **dict.fromkeys(
            ("router_replay.record_file", "router_replay.replay_file"),
            ROUTING_REPLAY,
        ),
    }
    actor = {
        "use_prefix_grouper": SPEED,
        "use_fused_kernels": SPEED,
        "checkpoint.async_save": SPEED,
        "calculate_entropy": "whether verl logs the entropy; entropy_coeff decides the loss",
        "use_remove_padding": PADDING,
        "freeze_vision_tower": "there is no vision tower in the text models trained here",
        "shuffle": "mini-batches here are drawn in a shuffled order, seeded by trainer.seed",
        "data_loader_seed": "the mini-batch order here is seeded by trainer.seed",
        **dict.fromkeys(
            ("tau_pos", "tau_neg"), "used by the SAPO policy loss only (policy_loss.loss_mode)"
        ),
        **dict.fromkeys(
            ("calculate_sum_pi_squared", "sum_pi_squared_checkpointing"),
            "used by verl's optimal-token-baseline estimator only",
        ),
        **{
            f"policy_loss.{name}": "used by the clip-cov and kl-cov policy losses only"
            for name in ("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio")
        },
        "policy_loss.ppo_kl_coef": "used by the kl-cov policy loss only",
    }
    # verl moves the frozen reference model to the CPU between its forward passes: the same
    # log-probs (verl's examples set param_offload=True there; a reference has no
    # optimizer or gradients to offload either)
    reference_offload = {
        f"{REF}{section}{name}": Inert(
            "the reference model's CPU offload between its uses: memory only, the same"
            " log-probs (the reference here stays on the device, sharded like the actor)"
        )
        for section, names in (("fsdp_config.", FSDP_OFFLOAD), ("megatron.", MEGATRON_OFFLOAD))
        for name in names
    }
    keys = {f"{role}{name}": Inert(why) for role in (ACTOR, REF) for name, why in both.items()}
    return keys | reference_offload | {ACTOR + name: Inert(why) for name, why in actor.items()}


def _rollout() -> dict[str, Inert]:
    """How verl's inference engine runs: its batching, caches and logging."""
    vllm = "how vLLM batches and caches: " + SPEED
    keys = {
        "max_num_batched_tokens": vllm,
        "max_num_seqs": vllm,
        "enable_chunked_prefill": vllm,
        "enable_prefix_caching": vllm,
        "scheduling_policy": vllm,
        "cudagraph_capture_sizes": vllm,
        "free_cache_engine": vllm,
        "multi_stage_wake_up": vllm,
        "skip_tokenizer_init": vllm,
        "disable_log_stats": "the engine's logging",
        "log_prob_max_token_len_per_gpu": "used only with log_prob_use_dynamic_bsz",
        "logprobs_mode": (
            "verl reads the engine's log-probs only for rollout correction"
            " (algorithm.rollout_correction)"
        ),
        "calculate_log_probs": (
            "verl keeps the engine's log-probs for rollout correction and its metrics"
        ),
        "agent.num_workers": "how many agent-loop workers verl runs: " + SPEED,
        "skip_dump_dir": "used only with skip_rollout",
    }
    return {ROLLOUT + name: Inert(why) for name, why in keys.items()}


def _rest() -> dict[str, Inert]:
    """The model, data, reward, algorithm and trainer keys that change no update."""
    multimodal = "images and videos: the models trained here are text models"
    dataset = "what verl's dataset hands its workers: the same prompts"
    return {
        **{model + "use_fused_kernels": Inert(SPEED, commands) for model, commands in HF_MODELS},
        **{
            f"optim.{name}": Inert(
                "used by Megatron's WSD schedule only (lr_decay_style=WSD), not available here",
                ("sft", "grpo"),
            )
            for name in ("lr_wsd_decay_style", "lr_wsd_decay_steps")
        },
        "actor_rollout_ref.nccl_timeout": Inert("a communication timeout"),
        "data.dataloader_num_workers": Inert(SPEED),
        "data.num_workers": Inert(SPEED, ("sft",)),  # sft_trainer's DataLoader workers
        "data.filter_overlong_prompts_workers": Inert(SPEED),
        "data.val_batch_size": Inert("how many validation prompts verl generates at once"),
        "data.seed": Inert(
            "the shuffle here is seeded by trainer.seed; verl's SFT dataset seeds with it only"
            " its pick of data.train_max_samples rows (data.shuffle), and every row is read here",
            ("sft", "grpo"),
        ),
        "data.return_raw_input_ids": Inert(dataset),
        "data.return_raw_chat": Inert(dataset),
        "data.return_full_prompt": Inert(dataset),
        # verl's SFT dataset (MultiTurnSFTDataset) reads these three too
        **{
            f"data.{name}": Inert(multimodal, ("sft", "grpo"))
            for name in ("image_key", "video_key", "image_patch_size")
        },
        "data.return_multi_modal_inputs": Inert(multimodal),
        "reward_manager.module.name": Inert(MODULE_PATH_ONLY),
        "reward_model.use_reward_loop": Inert(
            "whether verl scores responses during or after generation: the same rewards"
        ),
        "reward_model.launch_reward_fn_async": Inert(SPEED),
        "reward_model.num_workers": Inert(SPEED),
        "algorithm.gamma": Inert("used by GAE and REINFORCE++, not GRPO"),
        "algorithm.lam": Inert("used by GAE, not GRPO"),
        "algorithm.kl_penalty": Inert(KL_IN_REWARD),
        # sft_trainer's too after b178a3cd (its Ray trainer reads it)
        "trainer.balance_batch": Inert(
            "reorders a step's sequences across ranks: " + SPEED, ("sft", "grpo")
        ),
        "trainer.log_val_generations": Inert("how many validation generations verl logs"),
        "trainer.esi_redundant_time": Inert("when verl saves before a cloud instance expires"),
        "trainer.max_critic_ckpt_to_keep": Inert("there is no critic in GRPO"),
        "trainer.ray_wait_register_center_timeout": Inert("a Ray timeout: there is no Ray here"),
        # what a verl checkpoint holds (`hf_model`: Hugging Face weights too), not what trains
        **{
            section + "save_contents": Inert(
                "what verl writes into each checkpoint, not what trains; a checkpoint here"
                " holds the model, optimizer and trainer state, and `mfsdp ckpt export-hf`"
                " writes Hugging Face weights from it",
                commands,
            )
            for section, commands in CHECKPOINT_SECTIONS
        },
    }


def _megatron_lora() -> dict[str, Inert]:
    """verl's Megatron LoRA settings (read only at a lora.rank above 0) that change no update
    here; its settings that would are in `trainer.verl_off_keys`."""
    vision = (
        "read only by lora.type=vlm_lora (a vision-language model's LoRA); lora.type here is"
        " canonical_lora"
    )
    keys = {
        "merge": (
            "whether verl merges LoRA into the weights it hands its rollout engine or hands"
            " the adapter apart: the same policy; the engine here gets them merged"
        ),
        "dropout_position": "where LoRA dropout applies; it is 0 here (lora.dropout)",
        "a2a_experimental": (
            "Megatron's all-to-all for LoRA under expert parallelism: " + SPEED + "; there is"
            " no model parallelism here"
        ),
        **dict.fromkeys(
            ("freeze_vision_model", "freeze_vision_projection", "freeze_language_model"), vision
        ),
    }
    return {
        section + name: Inert(why, ("sft", "grpo"))
        for section in MEGATRON_LORA_SECTIONS
        for name, why in keys.items()
    }


def _newer() -> dict[str, Inert]:
    """Keys verl added after b178a3cd (its printed config at 1dda039) that change no update:
    padding and chunking for speed (padding is stripped before the loss), how its checkpoints
    and logs are written, and its trainer implementation."""
    optimizer_only = "Muon's settings; the optimizer here is AdamW (optim.optimizer)"
    per_role = {
        "entropy_from_logits_chunk_size": SPEED,
        "fsdp_config.entropy_from_logits_chunk_size": SPEED,
        **dict.fromkeys(
            ("pad_to_length", "fsdp_config.pad_to_length", "fsdp_config.pad_to_length_bucket"),
            SHAPE_PADDING,
        ),
    }
    muon = (
        "momentum",
        "nesterov",
        "split_qkv",
        "scale_mode",
        "coefficient_type",
        "num_ns_steps",
        "tp_mode",
        "fp32_matmul_prec",
        "extra_scale_factor",
        "scalar_optimizer",
        "match_adamw_update_rms",
    )
    return {
        **{role + name: Inert(why) for role in (ACTOR, REF) for name, why in per_role.items()},
        **{f"optim.muon_{name}": Inert(optimizer_only, ("sft", "grpo")) for name in muon},
        ACTOR + "checkpoint.strict": Inert("a check verl runs when it exports weights"),
        ACTOR + "checkpoint.mbridge_config": Inert(
            "how verl's Megatron backend writes Hugging Face weights (Megatron-Bridge)"
        ),
        ROLLOUT + "qat": Inert(
            only_with("the rollout's copy of the actor's QAT settings", "qat.enable")
        ),
        ROLLOUT + "moe_load_balance_metrics_interval": Inert("logging only"),
        ROLLOUT + "n_gpus_per_node": Inert("read only for a rollout on nodes of its own"),
        ROLLOUT + "seed": Inert(SEEDED),
        "trainer.use_v1": Inert(
            "which of verl's trainer implementations runs; its V1 trainer in sync mode rolls"
            " out the policy of the last update, as here"
        ),
        "reward.num_workers": Inert(SPEED),
        "reward.reward_manager.module.name": Inert(MODULE_PATH_ONLY),
        "data.audio_key": Inert("audio: the models trained here are text models"),
    }


INERT_KEYS: dict[str, Inert] = (
    _engine() | _megatron_engine() | _roles() | _rollout() | _rest() | _megatron_lora() | _newer()
)


def section_of(key: str) -> Inert | None:
    """The entry of the longest `SECTIONS` prefix of `key`, if any: a section ends at a
    dot, or at a Hydra group's slash (`hydra/job_logging`)."""
    for end in range(len(key) - 1, 0, -1):
        if key[end] in "./" and (found := SECTIONS.get(key[: end + 1])) is not None:
            return found
    return None
